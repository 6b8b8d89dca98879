package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// insertLeases adds n rows prefix/0000.. that expired age ago (a negative
// age: rows still held for that long). Setup in SQL, not through pglease.
func insertLeases(t *testing.T, pool *pgxpool.Pool, prefix string, n int, age time.Duration) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `
INSERT INTO lock_leases (lock_key, owner, owner_token, fence, acquired_at, expires_at)
SELECT $1 || '/' || lpad(g::text, 4, '0'), 'filler', 'filler', nextval('pgfence_fence_seq'),
       now() - $3::bigint * interval '1 microsecond' - interval '1 minute',
       now() - $3::bigint * interval '1 microsecond'
  FROM generate_series(0, $2::int - 1) g`, prefix, n, age.Microseconds()); err != nil {
		t.Fatal(err)
	}
}

func countLeases(t *testing.T, pool *pgxpool.Pool, prefix string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(),
		`SELECT count(*) FROM lock_leases WHERE starts_with(lock_key, $1 || '/')`, prefix).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Only rows expired longer than the grace go, whatever the batch size: batch
// sizes that divide the table exactly (the last batch full, then an empty
// one), that leave a remainder, and that exceed it.
func TestSweepBatchBoundaries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, batch := range []int{1, 7, 100, 300, 301, 1000} {
		t.Run(fmt.Sprint(batch), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.SchemaPool(t)
			insertLeases(t, pool, "old", 100, 48*time.Hour)   // swept
			insertLeases(t, pool, "recent", 100, time.Minute) // expired, but within the grace
			insertLeases(t, pool, "held", 100, -time.Hour)    // not expired
			c := newClient(t, pool, pglease.SweepBatchForTest(batch))
			n, err := c.SweepExpired(ctx, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if n != 100 {
				t.Fatalf("swept %d rows, want 100", n)
			}
			for prefix, want := range map[string]int{"old": 0, "recent": 100, "held": 100} {
				if got := countLeases(t, pool, prefix); got != want {
					t.Errorf("%s: %d rows left, want %d", prefix, got, want)
				}
			}
			if n, err := c.SweepExpired(ctx, 0); err != nil || n != 100 {
				t.Fatalf("second sweep with no grace: %d rows, %v; want the 100 recent ones", n, err)
			}
			if got := countLeases(t, pool, "held"); got != 100 {
				t.Fatalf("held: %d rows left, want 100", got)
			}
		})
	}
}

// Tombstones of abandoned acquisitions go in batches too, only those older
// than AbandonedTokenRetention.
func TestSweepTombstonesInBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.SchemaPool(t)
	if _, err := pool.Exec(ctx, `
INSERT INTO pgfence_abandoned_tokens (owner_token, abandoned_at)
SELECT 'tok' || g, CASE WHEN g % 2 = 0 THEN now() - $1::bigint * interval '1 microsecond' - interval '1 minute' ELSE now() END
  FROM generate_series(1, 50) g`, pglease.AbandonedTokenRetention.Microseconds()); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, pool, pglease.SweepBatchForTest(3))
	if _, err := c.SweepExpired(ctx, 0); err != nil {
		t.Fatal(err)
	}
	var left, old int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE abandoned_at < now() - interval '1 minute')
  FROM pgfence_abandoned_tokens`).Scan(&left, &old); err != nil {
		t.Fatal(err)
	}
	if left != 25 || old != 0 {
		t.Fatalf("%d tombstones left (%d old), want the 25 recent ones", left, old)
	}
}

// Sweeps with no grace run back to back, in batches of 3, while 8
// goroutines acquire, hold and release the same 40 keys: a held row is
// never deleted. If a sweep deleted a held row, another goroutine's
// TryAcquire would be granted the key while it is held (the checker sees
// two holders), and the holder's Renew would find its lease lost.
func TestSweepConcurrentWithAcquire(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := pgtest.SchemaPool(t, func(c *pgxpool.Config) { c.MaxConns = 12 })
	c := newClient(t, pool, pglease.WithoutAutoRenew(), pglease.SweepBatchForTest(3))
	const keys, workers, rounds = 40, 8, 300

	var mu sync.Mutex
	holder := map[string]int{} // key -> worker holding it
	var granted atomic.Int64
	acquirersDone := make(chan struct{})
	var sweeps, swept atomic.Int64
	sweepErr := make(chan error, 1)
	go func() {
		defer close(sweepErr)
		for {
			select {
			case <-acquirersDone:
				return
			default:
			}
			n, err := c.SweepExpired(ctx, 0)
			if err != nil {
				sweepErr <- err
				return
			}
			sweeps.Add(1)
			swept.Add(n)
		}
	}()

	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			var held []*pglease.Lease
			for range rounds {
				key := fmt.Sprintf("k/%02d", r.IntN(keys))
				l, err := c.TryAcquire(ctx, key, time.Minute)
				if errors.Is(err, pgfence.ErrNotAcquired) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				granted.Add(1)
				mu.Lock()
				if other, ok := holder[key]; ok {
					t.Errorf("%s granted to worker %d while worker %d holds it", key, w, other)
				}
				holder[key] = w
				mu.Unlock()
				held = append(held, l)
				if len(held) > 2 || r.IntN(2) == 0 { // release the oldest: its row expires and becomes sweepable
					old := held[0]
					held = held[1:]
					if err := old.Renew(ctx); err != nil {
						t.Errorf("renew %s before release: %v", old.Key(), err)
					}
					mu.Lock()
					delete(holder, old.Key())
					mu.Unlock()
					if err := old.Release(ctx); err != nil {
						t.Errorf("release %s: %v", old.Key(), err)
					}
				}
			}
			for _, l := range held {
				if err := l.Renew(ctx); err != nil {
					t.Errorf("renew %s at the end: %v", l.Key(), err)
				}
			}
		}()
	}
	wg.Wait()
	close(acquirersDone)
	if err := <-sweepErr; err != nil {
		t.Fatal(err)
	}
	if granted.Load() < rounds || sweeps.Load() < 2 || swept.Load() == 0 {
		t.Fatalf("too little overlap to mean anything: %d grants, %d sweeps, %d rows swept", granted.Load(), sweeps.Load(), swept.Load())
	}
	t.Logf("%d grants, %d sweeps deleting %d rows", granted.Load(), sweeps.Load(), swept.Load())
}

// cancelAfter is a query tracer that cancels a context once n statements
// ended: a context that ends between two batches, at a known point.
type cancelAfter struct {
	n      atomic.Int64
	cancel context.CancelFunc
}

func (c *cancelAfter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (c *cancelAfter) TraceQueryEnd(_ context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if c.n.Add(-1) == 0 {
		c.cancel()
	}
}

// A sweep whose context ends between batches returns the rows deleted so
// far with the context's error; the next sweep deletes the rest.
func TestSweepCanceledMidway(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tracer := &cancelAfter{cancel: cancel}
	pool := pgtest.SchemaPool(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = tracer })
	insertLeases(t, pool, "old", 50, time.Hour)
	c := newClient(t, pool, pglease.SweepBatchForTest(10))
	// The client's first statement checks for a connection pooler, so
	// count only after one sweep: then three batches.
	if n, err := c.SweepExpired(context.Background(), 2*time.Hour); err != nil || n != 0 { // settles the pooler check
		t.Fatalf("sweep with a longer grace: %d rows, %v; want none", n, err)
	}
	tracer.n.Store(3)
	n, err := c.SweepExpired(ctx, time.Minute)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %d rows and %v, want context.Canceled", n, err)
	}
	if n != 30 {
		t.Fatalf("swept %d rows before the cancel, want 30 (3 batches of 10)", n)
	}
	if left := countLeases(t, pool, "old"); left != 20 {
		t.Fatalf("%d rows left, want 20", left)
	}
	n, err = c.SweepExpired(context.Background(), time.Minute)
	if err != nil || n != 20 {
		t.Fatalf("second sweep: %d rows, %v; want 20", n, err)
	}
}

func TestSweepRefusesBadInput(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	c := newClient(t, pool)
	if _, err := c.SweepExpired(context.Background(), -time.Second); !errors.Is(err, pgfence.ErrInvalidInput) {
		t.Errorf("negative grace: %v, want pgfence.ErrInvalidInput", err)
	}
}

// SweepExpired deletes, with the plain leases, the permits that expired
// longer than the grace ago (counted), whatever the batch size, and the
// places dead waiters left in the queue (not counted); permits and places
// still live, or expired within the grace, stay, and so does the key's row
// with its number of permits.
func TestSweepPermitsAndPlaces(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, batch := range []int{1, 3, 1000} {
		t.Run(fmt.Sprint(batch), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.SchemaPool(t)
			if _, err := pool.Exec(ctx, `
INSERT INTO lock_leases (lock_key, slot, kind, permits, owner, owner_token, fence, acquired_at, expires_at)
SELECT 'sem', g, 'permit', 5, CASE WHEN g = 0 THEN '' ELSE 'filler' END, CASE WHEN g = 0 THEN '' ELSE 'filler-' || g END,
       nextval('pgfence_fence_seq'), now() - interval '3 days',
       CASE WHEN g < 4 THEN now() - interval '2 days' WHEN g = 4 THEN now() - interval '1 minute' ELSE now() + interval '1 hour' END
  FROM generate_series(1, 5) g;
INSERT INTO lock_leases (lock_key, slot, kind, permits, owner, owner_token, fence, acquired_at, expires_at)
VALUES ('sem', 0, 'permit', 5, '', '', nextval('pgfence_fence_seq'), now() - interval '3 days', now() + interval '1 hour');
INSERT INTO pgfence_waiters (lock_key, owner_token, owner, kind, permits, queued, ticket, expires_at)
VALUES ('m', 'dead', 'filler', 'exclusive', 0, true, nextval('pgfence_waiter_seq'), now() - interval '2 days'),
       ('m', 'live', 'filler', 'exclusive', 0, true, nextval('pgfence_waiter_seq'), now() + interval '1 hour'),
       ('sem', 'dead', 'filler', 'permit', 5, true, nextval('pgfence_waiter_seq'), now() - interval '2 days'),
       ('sem', 'dead2', 'filler', 'permit', 5, true, nextval('pgfence_waiter_seq'), now() - interval '2 days'),
       ('sem', 'recent', 'filler', 'permit', 5, true, nextval('pgfence_waiter_seq'), now() - interval '1 minute'),
       ('x', 'dead', '', 'exclusive', 0, false, nextval('pgfence_waiter_seq'), now() - interval '2 days'),
       ('x', 'live', '', 'exclusive', 0, false, nextval('pgfence_waiter_seq'), now() + interval '1 hour');`); err != nil {
				t.Fatal(err)
			}
			insertLeases(t, pool, "old", 2, 48*time.Hour)
			c := newClient(t, pool, pglease.SweepBatchForTest(batch))
			n, err := c.SweepExpired(ctx, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if n != 2+3 {
				t.Fatalf("swept %d, want 5 (2 leases, 3 permits)", n)
			}
			var left string
			if err := pool.QueryRow(ctx, `
SELECT (SELECT string_agg(slot::text, ',' ORDER BY slot) FROM lock_leases WHERE lock_key = 'sem') || ' | ' ||
       (SELECT string_agg(lock_key || ':' || owner_token, ',' ORDER BY lock_key, owner_token) FROM pgfence_waiters) || ' | ' ||
       (SELECT permits::text FROM lock_leases WHERE lock_key = 'sem' AND slot = 0)`).Scan(&left); err != nil {
				t.Fatal(err)
			}
			if want := "0,4,5 | m:live,sem:recent,x:live | 5"; left != want {
				t.Fatalf("left slots | places | permits: %q, want %q", left, want)
			}
		})
	}
}
