package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// 32 goroutines on ONE client try 6 keys at once, so that attempts go out in
// batches, often several for one key. Per key, a holder is alone, its fence
// is the row's, and fences rise in the order of entry.
func TestGroupAcquireManyCallersOneClient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	q := fencedb.New(pgtest.Pool(t))
	c := newClient(t, pool, pglease.WithoutAutoRenew())
	base := uniqueKey(t)
	keys := []string{base + "/0", base + "/1", base + "/2", base + "/3", base + "/4", base + "/5"}
	var inside [6]atomic.Int32
	var mu sync.Mutex
	last := map[string]int64{}
	var grants atomic.Int64

	const goroutines, rounds = 32, 40
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				k := (g*7 + r) % len(keys)
				l, err := c.TryAcquire(ctx, keys[k], 5*time.Second)
				if errors.Is(err, pgfence.ErrNotAcquired) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				if inside[k].Add(1) != 1 {
					t.Errorf("two holders of %s", keys[k])
				}
				mu.Lock()
				if l.Fence() <= last[keys[k]] {
					t.Errorf("%s: fence %d after %d", keys[k], l.Fence(), last[keys[k]])
				}
				last[keys[k]] = l.Fence()
				mu.Unlock()
				row, err := q.GetLease(ctx, keys[k])
				if err != nil || !row.Held || row.Fence != l.Fence() {
					t.Errorf("%s: row %+v, %v; lease fence %d", keys[k], row, err, l.Fence())
				}
				grants.Add(1)
				inside[k].Add(-1)
				if err := l.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if grants.Load() == 0 {
		t.Fatal("no grants")
	}
	if pglease.GroupBatched(c) == 0 {
		t.Fatal("no attempt went out in a batch: the test does not exercise group acquire")
	}
	t.Logf("%d grants, %d attempts batched", grants.Load(), pglease.GroupBatched(c))
}

// waitUntil polls cond (a condition on the server or the client's queue,
// which the test cannot be told of) until it holds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A caller whose batch is in flight gives up: the other caller of the batch
// still gets its lease (its statement was not cancelled), and the grant the
// batch made for the caller that gave up is released at once.
func TestGroupAcquireCallerGivesUpInFlight(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	direct := pgtest.Pool(t)
	q := fencedb.New(direct)
	c := newClient(t, pool, pglease.WithoutAutoRenew())
	base := uniqueKey(t)
	free, late := base+"/b-free", base+"/c-late"
	var firsts []string // one per acquisition the client runs before queueing
	for i := range pglease.GroupMaxInFlight {
		firsts = append(firsts, fmt.Sprintf("%s/a-first%d", base, i))
	}
	// Rows for the keys the transaction below locks, released.
	other := newClient(t, direct)
	var lateFence int64 // the fence of late's row before the batch
	for _, k := range append(slices.Clone(firsts), late) {
		l, err := other.TryAcquire(ctx, k, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		lateFence = l.Fence()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := direct.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT 1 FROM lock_leases WHERE lock_key = ANY ($1) FOR UPDATE", append(slices.Clone(firsts), late)); err != nil {
		t.Fatal(err)
	}
	lockWaits := func(t *testing.T, n int) func() bool {
		return func() bool { return lockWaiters(t, direct) >= n }
	}

	// The first attempts run alone and wait for their row locks until their
	// lock_timeout: the others queue behind them.
	firstErr := make(chan error, len(firsts))
	pgtest.Step(t, "the first attempts wait for their row locks", func(t *testing.T) {
		for _, k := range firsts {
			go func() { _, err := c.TryAcquire(ctx, k, time.Hour); firstErr <- err }()
		}
		waitUntil(t, "the first attempts wait for their row locks", lockWaits(t, len(firsts)))
	})

	type result struct {
		l   *pglease.Lease
		err error
	}
	freeRes, lateRes := make(chan result, 1), make(chan result, 1)
	lateCtx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	pgtest.Step(t, "two more attempts queue behind them", func(t *testing.T) {
		go func() { l, err := c.TryAcquire(ctx, free, time.Hour); freeRes <- result{l, err} }()
		go func() { l, err := c.TryAcquire(lateCtx, late, time.Hour); lateRes <- result{l, err} }()
		waitUntil(t, "two attempts queue", func() bool { return pglease.GroupPending(c) == 2 })
	})

	pgtest.Step(t, "the first attempts give up at their lock_timeout", func(t *testing.T) {
		for range firsts {
			if err := <-firstErr; !errors.Is(err, pgfence.ErrNotAcquired) {
				t.Fatalf("first attempt: want pgfence.ErrNotAcquired after its lock wait, got %v", err)
			}
		}
	})
	pgtest.Step(t, "a caller of the batch in flight gives up", func(t *testing.T) {
		// The batch (free, late) is in flight, waiting for late's row lock.
		waitUntil(t, "the batch waits for the row lock", lockWaits(t, 1))
		giveUp()
		if r := <-lateRes; r.err == nil || !errors.Is(r.err, context.Canceled) {
			t.Fatalf("caller that gave up: want context.Canceled, got %v, %v", r.l, r.err)
		}
	})
	var freeLease *pglease.Lease
	pgtest.Step(t, "the other caller of the batch gets its lease", func(t *testing.T) {
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-freeRes
		if r.err != nil {
			t.Fatalf("the other caller of the batch lost its attempt: %v", r.err)
		}
		freeLease = r.l
		if pglease.GroupBatched(c) != 2 {
			t.Fatalf("want one batch of 2, got %d batched attempts", pglease.GroupBatched(c))
		}
	})
	defer freeLease.Release(ctx)
	pgtest.Step(t, "the grant of the caller that gave up is released", func(t *testing.T) {
		// The batch granted late (its row lock came free in time); the caller
		// had gone, so the grant is given back, not held for an hour.
		waitUntil(t, "the grant of the caller that gave up is released", func() bool {
			row, err := q.GetLease(ctx, late)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				t.Fatal(err)
			}
			return err == nil && !row.Held && row.Fence > lateFence
		})
	})
}

// Behind PgBouncer in transaction mode (pgx's defaults, so pglease sends
// unnamed statements), batches carry their key, token and TTL arrays and
// every caller gets its own lease.
func TestGroupAcquireBehindPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newClient(t, pgtest.BouncerPool(t), pglease.WithoutAutoRenew())
	base := uniqueKey(t)
	const goroutines, rounds = 16, 10
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				l, err := c.TryAcquire(ctx, fmt.Sprintf("%s/%d/%d", base, g, r), 5*time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				if err := l.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if pglease.GroupBatched(c) == 0 {
		t.Fatal("no attempt went out in a batch: the test does not exercise group acquire")
	}
}
