package pglease_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/testsupport/faultproxy"
	"github.com/pgfence/pgfence/internal/testsupport/otelxtest"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// proxiedPool returns a pool whose connections go through a fault proxy
// (pgtest.ProxiedPool), with one connection, warmed by an acquire+release:
// behind a pooler pglease sends unnamed statements whose first execution on
// a connection is a describe round trip that does not run the statement,
// and a warm connection makes the next acquisition a single round trip
// that runs.
func proxiedPool(t *testing.T) (*pgxpool.Pool, *faultproxy.Proxy) {
	t.Helper()
	return proxiedPoolN(t, 1)
}

// proxiedPoolN is proxiedPool with up to n connections. With one, a caller
// that gave up waits for the pool's only connection, which pgx keeps until
// the delayed request's answer arrives: its abandon then runs after the
// delivery, and a late delivery is never exercised.
func proxiedPoolN(t *testing.T, n int32) (*pgxpool.Pool, *faultproxy.Proxy) {
	t.Helper()
	pool, proxy := pgtest.ProxiedPool(t, func(c *pgxpool.Config) { c.MaxConns = n })
	warm, err := pglease.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer warm.Close()
	l, err := warm.TryAcquire(context.Background(), uniqueKey(t)+":warm", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	return pool, proxy
}

// The connection breaks after the acquisition was sent and ran; the caller
// is still waiting, so the client asks by owner token and keeps the grant.
func TestAmbiguousAcquireGrantedIsKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, proxy := proxiedPool(t)
	direct := pgtest.Pool(t)
	c := newClient(t, pool)
	key := uniqueKey(t)

	fired := proxy.CutAfterSending("pgfence_lease_acquire(", 200*time.Millisecond)
	l, err := c.TryAcquire(ctx, key, 5*time.Second)
	select {
	case <-fired:
	default:
		t.Fatal("the fault never fired")
	}
	if err != nil {
		t.Fatalf("ambiguous but granted acquisition was not adopted: %v", err)
	}
	row, err := fencedb.New(direct).GetLease(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if !row.Held || row.Fence != l.Fence() {
		t.Fatalf("row %+v, lease fence %d", row, l.Fence())
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("adopted lease cannot renew: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// The answer never comes and the caller gives up (its context ends): the
// grant that did land is released at once, not left until its TTL.
func TestAmbiguousAcquireAbandonedIsReleased(t *testing.T) {
	ctx := context.Background()
	pool, proxy := proxiedPool(t)
	direct := pgtest.Pool(t)
	c := newClient(t, pool)
	key := uniqueKey(t)

	proxy.CutAfterSending("pgfence_lease_acquire(", time.Minute) // the answer never arrives
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err := c.TryAcquire(cctx, key, time.Hour)
	if err == nil {
		t.Fatal("acquisition with no answer succeeded")
	}
	var n int
	if err := direct.QueryRow(ctx, "SELECT count(*) FROM lock_leases WHERE lock_key = $1", key).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the statement should have run on the server: %d rows, %v", n, err)
	}
	// The caller returned with its context; the give-back runs in the
	// background and ends within ResolveBound.
	other := newClient(t, direct)
	var l *pglease.Lease
	deadline := time.Now().Add(pglease.ResolveBound)
	for l, err = other.TryAcquire(ctx, key, time.Second); err != nil; l, err = other.TryAcquire(ctx, key, time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("abandoned grant still held (would block for its 1h TTL): %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	l.Release(ctx)
}

// Acquire's retry loop goes through an ambiguous failure and ends holding
// exactly one lease on the key.
func TestAcquireRetriesThroughAmbiguity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, proxy := proxiedPool(t)
	c := newClient(t, pool, pglease.WithBackoff(5*time.Millisecond, 20*time.Millisecond))
	key := uniqueKey(t)
	proxy.CutAfterSending("pgfence_lease_acquire(", 100*time.Millisecond)
	l, err := c.Acquire(ctx, key, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil && !errors.Is(err, pgfence.ErrLeaseLost) {
		t.Fatal(err)
	}
}

// The acquisition's request reaches the server long after its caller gave up
// (held 4s by the network, past the one re-check at ~1.5s after giving up).
// The caller's tombstone for its owner token makes the late statement grant
// nothing: the key stays free. The control run removes the tombstone before
// the request lands and shows that the same late request would otherwise
// hold the key for its whole TTL.
func TestLateDeliveredAcquireNeverHoldsTheKey(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for two delayed deliveries (about 10s); run without -short")
	}
	ctx := context.Background()
	pool, proxy := proxiedPoolN(t, 4)
	direct := pgtest.Pool(t)
	q := fencedb.New(direct)
	c := newClient(t, pool)
	const delay = 4 * time.Second

	// giveUp sends an acquisition that the proxy delivers delay late, gives
	// up on it after 300ms, and returns when the request was delivered.
	giveUp := func(t *testing.T, key string, beforeDelivery func()) {
		t.Helper()
		delivered := proxy.DelayDelivery("pgfence_lease_acquire(", delay)
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		if _, err := c.TryAcquire(cctx, key, time.Hour); err == nil {
			t.Fatal("an acquisition whose request never arrived succeeded")
		}
		if beforeDelivery != nil {
			beforeDelivery()
		}
		select {
		case <-delivered:
		case <-time.After(2 * delay):
			t.Fatal("the delayed request was never delivered")
		}
	}
	held := func(t *testing.T, key string) bool {
		t.Helper()
		row, err := q.GetLease(ctx, key)
		if errors.Is(err, pgx.ErrNoRows) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		return row.Held
	}

	pgtest.Step(t, "control, without the tombstone the late request takes the key", func(t *testing.T) {
		control := uniqueKey(t) + "/control"
		giveUp(t, control, func() {
			// After the caller's re-check (~1.5s after giving up), before the
			// delivery: forget the tombstones, as the old code had none.
			time.Sleep(delay - time.Second) // the point: between re-check and delivery
			if _, err := direct.Exec(ctx, "DELETE FROM pgfence_abandoned_tokens"); err != nil {
				t.Fatal(err)
			}
		})
		deadline := time.Now().Add(5 * time.Second)
		for !held(t, control) {
			if time.Now().After(deadline) {
				t.Fatal("control: the late request never took the key; the test does not exercise a late delivery")
			}
			time.Sleep(20 * time.Millisecond) // polled: the delivery's effect is not signalled
		}
	})

	// The real thing: the tombstone stays, the late request grants nothing.
	key := uniqueKey(t)
	pgtest.Step(t, "with the tombstone the late request grants nothing", func(t *testing.T) {
		giveUp(t, key, nil)
		// A check that nothing happens: no event marks the end of the late
		// statement, so it gets a second to run.
		time.Sleep(time.Second)
		if held(t, key) {
			t.Fatal("a request delivered after its caller gave up holds the key")
		}
		other := newClient(t, direct)
		l, err := other.TryAcquire(ctx, key, time.Second)
		if err != nil {
			t.Fatalf("the key is not free after a late delivery: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})

	pgtest.Step(t, "the sweep keeps fresh tombstones", func(t *testing.T) {
		// They must outlive late deliveries.
		var before int
		if err := direct.QueryRow(ctx, "SELECT count(*) FROM pgfence_abandoned_tokens").Scan(&before); err != nil || before == 0 {
			t.Fatalf("no tombstone left by the caller that gave up: %d, %v", before, err)
		}
		if _, err := c.SweepExpired(ctx, 0); err != nil {
			t.Fatal(err)
		}
		var after int
		if err := direct.QueryRow(ctx, "SELECT count(*) FROM pgfence_abandoned_tokens").Scan(&after); err != nil || after != before {
			t.Fatalf("the sweep deleted fresh tombstones: %d before, %d after, %v", before, after, err)
		}
	})
}

// An acquisition whose answer is lost while the client closes: its grant
// lands on the server only after the caller's first give-back (the row was
// locked by another transaction then), and the second give-back, which
// Close no longer waits for, runs on the caller's goroutine instead of being
// dropped. The key is not left held for the hour-long TTL.
func TestCloseDuringAmbiguousAcquireStillGivesBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var open atomic.Bool
	open.Store(true)
	schema := pgtest.Schema(t) // the tombstones counted are this test's alone
	pool, proxy := pgtest.ProxiedPoolGated(t, open.Load, inSchema(t, schema), func(cfg *pgxpool.Config) { cfg.MaxConns = 2 })
	for range 2 { // two connections made while the gate is open
		conns := make([]*pgxpool.Conn, 0, 2)
		for range 2 {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, conn)
		}
		for _, conn := range conns {
			conn.Release()
		}
	}
	direct := pgtest.Pool(t, inSchema(t, schema))
	q := fencedb.New(direct)
	c, err := pglease.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := uniqueKey(t)
	tombstones := func() (n int) {
		if err := direct.QueryRow(ctx, "SELECT count(*) FROM pgfence_abandoned_tokens").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := tombstones()

	// An uncommitted row for key: the acquisition waits for it, and the
	// first give-back cannot see it.
	tx, err := direct.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "INSERT INTO lock_leases VALUES ($1, 'blocker', 'blocker-token', 1, now(), now())", key); err != nil {
		t.Fatal(err)
	}
	fired := proxy.CutAfterSending("pgfence_lease_acquire(", 300*time.Millisecond)
	res := make(chan error, 1)
	go func() { _, err := c.TryAcquire(ctx, key, time.Hour); res <- err }()
	pgtest.Step(t, "the client closes while the answer is lost", func(t *testing.T) {
		<-fired
		open.Store(false) // no cancel request reaches the server
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	})
	pgtest.Step(t, "the caller gives the grant back once; the row is locked then", func(t *testing.T) {
		waitUntil(t, "the caller tombstones its token", func() bool { return tombstones() > before })
	})
	pgtest.Step(t, "the blocker goes; the waiting acquisition is granted", func(t *testing.T) {
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the late grant lands", func() bool {
			row, err := q.GetLease(ctx, key)
			return err == nil && row.Owner == c.Owner()
		})
	})
	pgtest.Step(t, "the second give-back releases it", func(t *testing.T) {
		if err := <-res; err == nil {
			t.Fatal("the acquisition whose answer was lost succeeded after Close")
		}
		row, err := q.GetLease(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if row.Held {
			t.Fatalf("the late grant is still held (%v left): the second give-back was dropped",
				time.Duration(row.RemainingMicros)*time.Microsecond)
		}
	})
}

// A caller whose context ends while it waits for a pool connection sent
// nothing: it gets its context's error at once, not the outcome-unknown path
// (which wrote a tombstone and kept it up to 5 s past its deadline on a pool
// that had no connection to spare).
func TestPoolWaitIsNotAmbiguous(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t) // the tombstones counted are this test's alone
	pool := pgtest.Pool(t, inSchema(t, schema), func(cfg *pgxpool.Config) { cfg.MaxConns = 1 })
	direct := pgtest.Pool(t, inSchema(t, schema))
	met := otelxtest.New(t)
	c := newClient(t, pool, pglease.WithMeterProvider(met.Provider))
	key := uniqueKey(t)
	var before int
	if err := direct.QueryRow(ctx, "SELECT count(*) FROM pgfence_abandoned_tokens").Scan(&before); err != nil {
		t.Fatal(err)
	}
	held, err := pool.Acquire(ctx) // the pool's only connection
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()

	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = c.TryAcquire(cctx, key, time.Minute)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryAcquire with no connection to take: %v, want context.DeadlineExceeded", err)
	}
	if n := met.Collect().Value("pgfence.lease.ambiguous.resolutions"); errors.Is(err, pglease.ErrAmbiguous) || n != 0 {
		t.Fatalf("a statement never sent was taken for one whose answer was lost: %v, %v ambiguous resolutions", err, n)
	}
	if took > time.Second {
		t.Fatalf("TryAcquire returned %v after its 100ms deadline", took-100*time.Millisecond)
	}
	var after int
	if err := direct.QueryRow(ctx, "SELECT count(*) FROM pgfence_abandoned_tokens").Scan(&after); err != nil || after != before {
		t.Fatalf("tombstones %d -> %d (err %v): nothing was sent, nothing to abandon", before, after, err)
	}
}
