package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

func newClient(t *testing.T, pool *pgxpool.Pool, opts ...pglease.Option) *pglease.Client {
	t.Helper()
	c, err := pglease.New(pool, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// inSchema points a pool's connections at schema (from pgtest.Schema), for
// tests that count or sweep whole tables while other tests run: two pools
// of one test share the schema, which pgtest.SchemaPool cannot do.
func inSchema(t *testing.T, schema string) func(*pgxpool.Config) {
	return pgtest.InSchema(schema)
}

func uniqueKey(t *testing.T) string {
	return fmt.Sprintf("%s:%d", t.Name(), rand.Int64())
}

// 32 goroutines across 2 clients (each with its own pool) hammer 4 keys. A
// shared checker counts holders per key: it must never see two at once, and
// the fences it sees per key must rise strictly in the order of entry.
func TestMutualExclusion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clients := []*pglease.Client{
		newClient(t, pgtest.Pool(t), pglease.WithOwner("client-a"), pglease.WithBackoff(time.Millisecond, 20*time.Millisecond)),
		newClient(t, pgtest.Pool(t), pglease.WithOwner("client-b"), pglease.WithBackoff(time.Millisecond, 20*time.Millisecond)),
	}
	keys := []string{uniqueKey(t) + "/0", uniqueKey(t) + "/1", uniqueKey(t) + "/2", uniqueKey(t) + "/3"}
	var inside [4]atomic.Int32
	var mu sync.Mutex
	lastFence := map[string]int64{}
	var entries, overlaps atomic.Int64

	const goroutines, rounds = 32, 25
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[g%2]
			for r := range rounds {
				k := (g + r) % 4
				err := c.Do(ctx, keys[k], 5*time.Second, func(ctx context.Context, l *pglease.Lease) error {
					if inside[k].Add(1) != 1 {
						overlaps.Add(1)
					}
					mu.Lock()
					if l.Fence() <= lastFence[keys[k]] {
						t.Errorf("key %d: fence %d after %d", k, l.Fence(), lastFence[keys[k]])
					}
					lastFence[keys[k]] = l.Fence()
					mu.Unlock()
					entries.Add(1)
					time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond) // the point: hold a while, widening any overlap
					if context.Cause(l.Context()) != nil {
						t.Errorf("lease ended while held: %v", context.Cause(l.Context()))
					}
					inside[k].Add(-1)
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlapping entries", overlaps.Load())
	}
	if entries.Load() != goroutines*rounds {
		t.Fatalf("entries = %d, want %d", entries.Load(), goroutines*rounds)
	}
}

// Fences rise per key across release and across the sweep deleting the row.
// The sweep deletes every expired row, so the test has a schema of its own.
func TestFencesIncreaseAcrossReleaseAndSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.SchemaPool(t)
	c := newClient(t, pool)
	key := uniqueKey(t)
	var prev int64
	for i := range 6 {
		l, err := c.TryAcquire(ctx, key, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= prev {
			t.Fatalf("round %d: fence %d not above %d", i, l.Fence(), prev)
		}
		prev = l.Fence()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 { // delete every expired row
			n, err := c.SweepExpired(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fencedb.New(pool).GetLease(ctx, key); err == nil {
				t.Fatalf("round %d: sweep (%d rows) left the released row", i, n)
			}
		}
	}
}

// Expiry is decided by the database clock: after a short TTL another client
// acquires; the old lease's Renew is pgfence.ErrLeaseLost and does not resurrect it;
// its Release leaves the new holder untouched.
func TestExpiryByDatabaseClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	a := newClient(t, pool, pglease.WithoutAutoRenew())
	b := newClient(t, pool, pglease.WithoutAutoRenew())
	key := uniqueKey(t)
	// Long enough that the refusal below comes before it ends on a loaded
	// machine; the test waits for the expiry, whatever the TTL.
	const ttl = time.Second

	var la, lb *pglease.Lease
	pgtest.Step(t, "a held key is refused to another client", func(t *testing.T) {
		var err error
		la, err = a.TryAcquire(ctx, key, ttl)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.TryAcquire(ctx, key, time.Second); !errors.Is(err, pgfence.ErrNotAcquired) {
			t.Fatalf("while held: err = %v, want pgfence.ErrNotAcquired", err)
		}
	})

	pgtest.Step(t, "after its TTL the lease ends and another client acquires", func(t *testing.T) {
		select {
		case <-la.Context().Done():
		case <-time.After(5 * ttl):
			t.Fatal("lease context did not end after its TTL")
		}
		if !errors.Is(context.Cause(la.Context()), pgfence.ErrLeaseLost) {
			t.Fatalf("cause = %v, want pgfence.ErrLeaseLost", context.Cause(la.Context()))
		}
		// Polled: wait until the database agrees the lease expired.
		for deadline := time.Now().Add(5 * ttl); ; {
			var err error
			lb, err = b.TryAcquire(ctx, key, 5*time.Second)
			if err == nil {
				break
			}
			if !errors.Is(err, pgfence.ErrNotAcquired) || time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if lb.Fence() <= la.Fence() {
			t.Fatalf("new fence %d not above old %d", lb.Fence(), la.Fence())
		}
	})

	pgtest.Step(t, "the old lease's Renew and Release leave the new holder alone", func(t *testing.T) {
		if err := la.Renew(ctx); !errors.Is(err, pgfence.ErrLeaseLost) {
			t.Fatalf("renew of expired lease: %v, want pgfence.ErrLeaseLost", err)
		}
		if err := la.Release(ctx); !errors.Is(err, pgfence.ErrLeaseLost) {
			t.Fatalf("release of lost lease: %v, want pgfence.ErrLeaseLost", err)
		}
		row, err := fencedb.New(pool).GetLease(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if row.Fence != lb.Fence() || !row.Held {
			t.Fatalf("new holder disturbed: row %+v, want fence %d held", row, lb.Fence())
		}
		if err := lb.Renew(ctx); err != nil {
			t.Fatalf("new holder cannot renew: %v", err)
		}
		if err := lb.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// A renewal of an expired lease must not resurrect it even when nobody else
// took the key.
func TestRenewDoesNotResurrect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := newClient(t, pool, pglease.WithoutAutoRenew())
	key := uniqueKey(t)
	l, err := c.TryAcquire(ctx, key, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond) // the point: the 50ms TTL runs out by the database clock
	if err := l.Renew(ctx); !errors.Is(err, pgfence.ErrLeaseLost) {
		t.Fatalf("renew after expiry: %v, want pgfence.ErrLeaseLost", err)
	}
	row, err := fencedb.New(pool).GetLease(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if row.Held {
		t.Fatal("expired lease was resurrected")
	}
}

// Auto-renewal keeps a lease alive across five times its TTL, by the
// database clock. The TTL (2 s: a renewal every 667 ms, the local deadline
// at 1.8 s) leaves room for a loaded machine to be late by more than a
// second before a renewal misses it.
func TestAutoRenewKeepsLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := newClient(t, pool)
	other := newClient(t, pool)
	key := uniqueKey(t)
	const ttl = 2 * time.Second
	l, err := c.TryAcquire(ctx, key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	var start time.Time
	if err := pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&start); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := other.TryAcquire(ctx, key, ttl); !errors.Is(err, pgfence.ErrNotAcquired) {
			t.Fatalf("other client: %v, want ErrNotAcquired", err)
		}
		if context.Cause(l.Context()) != nil {
			t.Fatalf("lease ended: %v", context.Cause(l.Context()))
		}
		var done bool
		if err := pool.QueryRow(ctx, "SELECT clock_timestamp() >= $1::timestamptz + $2::interval",
			start, (5 * ttl).String()).Scan(&done); err != nil {
			t.Fatal(err)
		}
		if done {
			break
		}
		time.Sleep(ttl / 20) // the pace of the samples, not a wait for anything
	}
	// Renewed by the database: the row now expires more than four TTLs
	// after the acquisition's expiry.
	row, err := fencedb.New(pool).GetLease(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if !row.Held || row.Fence != l.Fence() || row.ExpiresAt.Sub(start) < 4*ttl {
		t.Fatalf("row %+v after five TTLs, want fence %d held until later than %v", row, l.Fence(), start.Add(4*ttl))
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A stalled renewal loses the lease, and its context ends at the local
// deadline: not before it, and within a few milliseconds of a timer armed
// for the same instant (a loaded machine makes both late alike; waiting
// for the next retry or the server's expiry would be margin/2 and more
// later). The TTL (2 s, the first renewal at 667 ms) lets the renewal
// start before the deadline however busy the machine is.
func TestStalledRenewalLosesLease(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := newClient(t, pool)
	var stalled atomic.Int32
	pglease.SetRenewHook(c, func(ctx context.Context, l *pglease.Lease) (time.Time, error) {
		stalled.Add(1)
		<-ctx.Done() // the network ate the renewal
		return time.Time{}, ctx.Err()
	})
	const ttl = 2 * time.Second
	l, err := c.TryAcquire(ctx, uniqueKey(t), ttl)
	if err != nil {
		t.Fatal(err)
	}
	deadline := l.Deadline()
	fired := make(chan time.Time, 1)
	time.AfterFunc(time.Until(deadline), func() { fired <- time.Now() })
	select {
	case <-l.Context().Done():
	case <-time.After(3 * ttl):
		t.Fatal("lease context still alive long after its TTL")
	}
	ended := time.Now()
	if ended.Before(deadline) {
		t.Fatalf("context ended %v before the local deadline", deadline.Sub(ended))
	}
	margin := ttl / 10
	if late := ended.Sub(<-fired); late > margin/2 {
		t.Fatalf("context ended %v after a timer armed for the local deadline fired, want within %v", late, margin/2)
	}
	var lost *pgfence.LeaseLostError
	if !errors.As(context.Cause(l.Context()), &lost) || !errors.Is(context.Cause(l.Context()), pgfence.ErrLeaseLost) {
		t.Fatalf("cause = %v, want a *LeaseLostError satisfying pgfence.ErrLeaseLost", context.Cause(l.Context()))
	}
	if lost.Key != l.Key() || lost.Fence != l.Fence() || lost.Cause != "local_deadline" {
		t.Fatalf("lost = %+v, want key %q, fence %d, cause local_deadline", lost, l.Key(), l.Fence())
	}
	if stalled.Load() == 0 {
		t.Fatal("the renewal hook never ran")
	}
}

// A definite zero-row renewal ends the lease at once, long before the local
// deadline.
func TestLostRenewalEndsLeaseAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := newClient(t, pool, pglease.WithRenewInterval(50*time.Millisecond))
	key := uniqueKey(t)
	l, err := c.TryAcquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// An operator (or a bug) takes the row away.
	if _, err := pool.Exec(ctx, "UPDATE lock_leases SET expires_at = now() WHERE lock_key = $1", key); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Context().Done():
	case <-time.After(2 * time.Second):
		t.Fatal("lease not ended after a renewal found it gone")
	}
	var lost *pgfence.LeaseLostError
	if !errors.As(context.Cause(l.Context()), &lost) || !errors.Is(context.Cause(l.Context()), pgfence.ErrLeaseLost) {
		t.Fatalf("cause = %v, want a *LeaseLostError satisfying pgfence.ErrLeaseLost", context.Cause(l.Context()))
	}
	if lost.Cause != "unknown" {
		t.Fatalf("lost cause = %q, want unknown (a renewal found it gone)", lost.Cause)
	}
}

func TestAcquireWaitsAndGivesUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	holder := newClient(t, pool)
	waiter := newClient(t, pool, pglease.WithMaxWait(300*time.Millisecond), pglease.WithBackoff(5*time.Millisecond, 50*time.Millisecond))
	key := uniqueKey(t)
	l, err := holder.TryAcquire(ctx, key, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Step(t, "the wait gives up after the maximum wait", func(t *testing.T) {
		start := time.Now()
		_, err := waiter.Acquire(ctx, key, time.Second)
		if !errors.Is(err, pgfence.ErrNotAcquired) {
			t.Fatalf("err = %v, want pgfence.ErrNotAcquired", err)
		}
		if waited := time.Since(start); waited < 300*time.Millisecond || waited > 2*time.Second {
			t.Fatalf("waited %v for a 300ms maximum", waited)
		}
		if !strings.Contains(err.Error(), "waiting") || strings.Contains(err.Error(), "(1 attempts)") {
			t.Fatalf("wait error: %v, want one that says it waited, after more than one attempt", err)
		}
	})

	// w2's sessions carry an application_name of their own, so that
	// pg_stat_activity shows when one of them has tried the key.
	app := "pgfence-midwait-" + strconv.FormatInt(rand.Int64(), 36)
	w2 := newClient(t, pgtest.Pool(t, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["application_name"] = app }),
		pglease.WithBackoff(5*time.Millisecond, 50*time.Millisecond))
	pgtest.Step(t, "released mid-wait, the waiter gets the key", func(t *testing.T) {
		// Released once the waiter has tried the held key (and so been
		// refused) at least once.
		go func() {
			defer l.Release(context.Background())
			for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				var n int
				if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
					WHERE application_name = $1 AND query LIKE '%pgfence_lease_acquire(%'`, app).Scan(&n); err == nil && n > 0 {
					return
				}
			}
			t.Errorf("the waiter never tried the held key")
		}()
		got, err := w2.Acquire(ctx, key, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if got.Fence() <= l.Fence() {
			t.Fatalf("fence %d not above %d", got.Fence(), l.Fence())
		}
		got.Release(ctx)
	})

	pgtest.Step(t, "the context ends the wait, and the error says so", func(t *testing.T) {
		l3, _ := holder.TryAcquire(ctx, key, 5*time.Second)
		cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err := w2.Acquire(cctx, key, time.Second)
		if !errors.Is(err, pgfence.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want pgfence.ErrNotAcquired and DeadlineExceeded", err)
		}
		l3.Release(ctx)
	})
}

func TestDoEndsContextOnLoss(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := newClient(t, pool, pglease.WithRenewInterval(50*time.Millisecond))
	key := uniqueKey(t)
	err := c.Do(ctx, key, 5*time.Second, func(ctx context.Context, l *pglease.Lease) error {
		if _, err := pool.Exec(ctx, "UPDATE lock_leases SET expires_at = now() WHERE lock_key = $1", key); err != nil {
			return err
		}
		<-ctx.Done()
		return context.Cause(ctx)
	})
	if !errors.Is(err, pgfence.ErrLeaseLost) {
		t.Fatalf("Do: %v, want pgfence.ErrLeaseLost", err)
	}

	// TryDo skips a held key without running fn.
	l, err := c.TryAcquire(ctx, key, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	err = newClient(t, pool).TryDo(ctx, key, time.Second, func(context.Context, *pglease.Lease) error { ran = true; return nil })
	if !errors.Is(err, pgfence.ErrNotAcquired) || ran {
		t.Fatalf("TryDo on held key: err %v, ran %v", err, ran)
	}
	l.Release(ctx)
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	if _, err := pglease.New(nil); !errors.Is(err, pgfence.ErrInvalidInput) {
		t.Fatalf("nil pool: %v", err)
	}
	if _, err := pglease.New(pool, pglease.WithBackoff(time.Second, time.Millisecond)); !errors.Is(err, pgfence.ErrInvalidInput) {
		t.Fatalf("bad backoff: %v", err)
	}
	c := newClient(t, pool)
	slow := newClient(t, pool, pglease.WithRenewInterval(time.Second))
	cases := []struct {
		name string
		c    *pglease.Client
		key  string
		ttl  time.Duration
	}{
		{"empty key", c, "", time.Second},
		{"long key", c, strings.Repeat("k", 513), time.Second},
		{"invalid utf8", c, "bad\xffkey", time.Second},
		{"nul", c, "a\x00b", time.Second},
		{"zero ttl", c, "k", 0},
		{"negative ttl", c, "k", -time.Second},
		{"huge ttl", c, "k", 25 * time.Hour},
		{"renew >= ttl", slow, "k", time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, f := range []func() error{
				func() error { _, err := tc.c.TryAcquire(ctx, tc.key, tc.ttl); return err },
				func() error { _, err := tc.c.Acquire(ctx, tc.key, tc.ttl); return err },
				func() error {
					return tc.c.Do(ctx, tc.key, tc.ttl, func(context.Context, *pglease.Lease) error { return nil })
				},
			} {
				if err := f(); !errors.Is(err, pgfence.ErrInvalidInput) {
					t.Fatalf("err = %v, want pgfence.ErrInvalidInput", err)
				}
			}
		})
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM lock_leases WHERE lock_key IN ('', 'k')").Scan(&n); err != nil || n != 0 {
		t.Fatalf("bad input reached the database: %d rows, %v", n, err)
	}
	// A key of exactly 512 bytes is fine.
	l, err := c.TryAcquire(ctx, strings.Repeat("é", 256), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	l.Release(ctx)
}

func TestMissingSchemaSaysWhatToDo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.RuntimeParams["search_path"] = "pg_catalog" // hides lock_leases
	})
	c := newClient(t, pool)
	_, err := c.TryAcquire(ctx, "k", time.Second)
	if err == nil || !strings.Contains(err.Error(), "pgfence migrate up") {
		t.Fatalf("err = %v, want a hint to run the migrations", err)
	}
	_, err = c.Acquire(ctx, "k", time.Second)
	if err == nil || !strings.Contains(err.Error(), "pgfence migrate up") {
		t.Fatalf("Acquire kept retrying a definite error: %v", err)
	}
}

func TestCloseReleasesLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c, err := pglease.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	key := uniqueKey(t)
	l, err := c.TryAcquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if context.Cause(l.Context()) == nil {
		t.Fatal("lease context alive after Close")
	}
	if _, err := c.TryAcquire(ctx, key, time.Second); !errors.Is(err, pglease.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	l2, err := newClient(t, pool).TryAcquire(ctx, key, time.Second)
	if err != nil {
		t.Fatalf("Close left the lease held: %v", err)
	}
	l2.Release(ctx)
}

// A panic in Do's function goes on up, after the lease is released; a nil
// function is refused before anything is acquired.
func TestDoReleasesOnPanic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	q := fencedb.New(pool)
	c := newClient(t, pool)
	key := uniqueKey(t)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic did not reach Do's caller")
			}
		}()
		c.Do(ctx, key, time.Hour, func(context.Context, *pglease.Lease) error { panic("boom") })
	}()
	row, err := q.GetLease(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if row.Held {
		t.Fatal("the lease stayed held after its function panicked")
	}
	if err := c.Do(ctx, key, time.Second, nil); !errors.Is(err, pgfence.ErrInvalidInput) {
		t.Fatalf("Do(nil) = %v, want pgfence.ErrInvalidInput", err)
	}
	if err := c.TryDo(ctx, key, time.Second, nil); !errors.Is(err, pgfence.ErrInvalidInput) {
		t.Fatalf("TryDo(nil) = %v, want pgfence.ErrInvalidInput", err)
	}
}

// A renew interval that does not come before the local deadline (TTL minus
// the safety margin) could never keep a lease: it is refused per call.
func TestRenewIntervalBeforeLocalDeadline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	for _, tc := range []struct {
		name string
		opts []pglease.Option
	}{
		{"margin leaves less than the default interval", []pglease.Option{pglease.WithSafetyMargin(900 * time.Millisecond)}},
		{"interval past TTL minus the default margin", []pglease.Option{pglease.WithRenewInterval(950 * time.Millisecond)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, pool, tc.opts...)
			if _, err := c.TryAcquire(ctx, uniqueKey(t), time.Second); !errors.Is(err, pgfence.ErrInvalidInput) {
				t.Fatalf("TryAcquire with TTL 1s = %v, want pgfence.ErrInvalidInput", err)
			}
			l, err := c.TryAcquire(ctx, uniqueKey(t), 10*time.Second) // the same options fit a longer TTL
			if err != nil {
				t.Fatal(err)
			}
			l.Release(ctx)
		})
	}
}
