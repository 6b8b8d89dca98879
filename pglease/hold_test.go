package pglease_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// A lease released before its minimum hold stays held until its grant time
// plus the hold, by the database clock, and is granted after it; the same
// for a semaphore permit.
func TestHoldAtLeast(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, pgtest.Pool(t))
	key := uniqueKey(t)
	sem := semaphore(t, c, key, 1)
	for name, acquire := range map[string]func() (*pglease.Lease, error){
		"mutex":  func() (*pglease.Lease, error) { return c.TryAcquire(ctx, key, 5*time.Second) },
		"permit": func() (*pglease.Lease, error) { return sem.TryAcquire(ctx, 5*time.Second) },
	} {
		t.Run(name, func(t *testing.T) {
			l, err := acquire()
			if err != nil {
				t.Fatal(err)
			}
			granted := time.Now()
			if err := l.HoldAtLeast(time.Second); err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if !errors.Is(context.Cause(l.Context()), pglease.ErrReleased) {
				t.Fatalf("after release: %v", context.Cause(l.Context()))
			}
			if _, err := acquire(); !errors.Is(err, pgfence.ErrNotAcquired) {
				t.Fatalf("right after an early release with a 1 s minimum hold: %v", err)
			}
			time.Sleep(time.Until(granted.Add(1100 * time.Millisecond)))
			l2, err := acquire()
			if err != nil {
				t.Fatalf("after the minimum hold: %v", err)
			}
			l2.Release(ctx)
		})
	}
	if err := (&pglease.Lease{}).HoldAtLeast(-time.Second); !errors.Is(err, pgfence.ErrInvalidInput) {
		t.Fatalf("negative hold: %v", err)
	}
}

// Four instances tick every 50 ms for 5 periods of 700 ms: exactly one run per
// period the ticks covered, never two in one period (by the period index the
// database clock gave).
func TestOncePerPeriod(t *testing.T) {
	ctx := context.Background()
	key := uniqueKey(t)
	const period = 700 * time.Millisecond
	var mu sync.Mutex
	runs := map[int64]int{}
	var wg sync.WaitGroup
	stop := time.Now().Add(5 * period)
	for i := range 4 {
		c := newClient(t, pgtest.Pool(t), pglease.WithOwner("instance"+string(rune('a'+i))))
		wg.Go(func() {
			for time.Now().Before(stop) {
				_, err := c.OncePerPeriod(ctx, key, period, 2*time.Second, func(ctx context.Context, run pglease.PeriodRun) error {
					mu.Lock()
					runs[run.Index]++
					mu.Unlock()
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	first, last := int64(1<<62), int64(0)
	for idx, n := range runs {
		if n != 1 {
			t.Errorf("period %d ran %d times", idx, n)
		}
		first, last = min(first, idx), max(last, idx)
	}
	if int(last-first+1) != len(runs) || len(runs) < 4 {
		t.Fatalf("runs per period %v: want one in each of the 5 periods covered", runs)
	}
}

// A run longer than the period, and longer than the TTL its lease was
// granted with, keeps the key until it returns: no call runs meanwhile,
// the next call after it runs once, for the period it is in, and the
// missed periods are not made up. The run lasts until the database clock
// is past the lease's first expiry, so the key was kept by renewal, and
// the test ends it only after its last call: no call can land after the
// run by being late.
func TestOncePerPeriodLongRun(t *testing.T) {
	ctx := context.Background()
	key := uniqueKey(t)
	pool := pgtest.Pool(t)
	a, b := newClient(t, pool), newClient(t, pool)
	// Renewed every second and given up 2.7 s after its last renewal was
	// sent, the lease survives a renewal well over a second late, as on a
	// loaded machine; a lost lease would let b run.
	const period, ttl = 300 * time.Millisecond, 3 * time.Second
	var inside, overlaps, ran atomic.Int32
	enter := func() func() {
		if inside.Add(1) != 1 {
			overlaps.Add(1)
		}
		ran.Add(1)
		return func() { inside.Add(-1) }
	}
	dbNow := func() time.Time {
		var now time.Time
		if err := pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now); err != nil {
			t.Fatal(err)
		}
		return now
	}
	type begun struct {
		run     pglease.PeriodRun
		expires time.Time // the granted expiry, by the database clock
	}
	started, finish, done := make(chan begun, 1), make(chan struct{}), make(chan struct{})
	end := sync.OnceFunc(func() { close(finish) })
	go func() {
		defer close(done)
		ok, err := a.OncePerPeriod(ctx, key, period, ttl, func(ctx context.Context, run pglease.PeriodRun) error {
			defer enter()()
			started <- begun{run, run.Lease.ExpiresAt()}
			select {
			case <-finish:
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
		if !ok || err != nil {
			t.Errorf("the long run: %v %v", ok, err)
		}
	}()
	defer func() { end(); <-done }()
	var first begun
	select {
	case first = <-started:
	case <-done:
		t.FailNow()
	}
	var last time.Time
	for calls := 1; ; calls++ {
		ok, err := b.OncePerPeriod(ctx, key, period, ttl, func(context.Context, pglease.PeriodRun) error {
			defer enter()()
			return nil
		})
		if err != nil || ok {
			t.Fatalf("call %d during the long run ran: %v %v", calls, ok, err)
		}
		if last = dbNow(); last.After(first.expires) {
			break
		}
		time.Sleep(period / 3)
	}
	end()
	<-done
	var after pglease.PeriodRun
	ok, err := b.OncePerPeriod(ctx, key, period, ttl, func(_ context.Context, run pglease.PeriodRun) error {
		defer enter()()
		after = run
		return nil
	})
	if err != nil || !ok {
		t.Fatalf("the call after the long run: %v %v", ok, err)
	}
	if ran.Load() != 2 || overlaps.Load() != 0 {
		t.Fatalf("%d runs, %d overlaps; want 2 and 0", ran.Load(), overlaps.Load())
	}
	if !after.End.After(last) {
		t.Errorf("the call after the long run ran for period %d (%v to %v), which had passed while the run went on (at %v): a missed period made up",
			after.Index, after.Start, after.End, last)
	}
}
