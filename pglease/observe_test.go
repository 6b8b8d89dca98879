package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// next receives from ch until want accepts a value, and fails the test after
// 10 seconds or when ch closes. It returns the accepted value and every
// value received on the way (including it).
func next(t *testing.T, ch <-chan pglease.Holder, what string, want func(pglease.Holder) bool) (pglease.Holder, []pglease.Holder) {
	t.Helper()
	var seen []pglease.Holder
	timeout := time.After(10 * time.Second)
	for {
		select {
		case h, ok := <-ch:
			if !ok {
				t.Fatalf("waiting for %s: channel closed; saw %+v", what, seen)
			}
			seen = append(seen, h)
			if want(h) {
				return h, seen
			}
		case <-timeout:
			t.Fatalf("waiting for %s: nothing in 10s; saw %+v", what, seen)
		}
	}
}

// Three candidates campaign on one key and an observer on a fourth client
// follows the leadership: it sees the first leader, then after the leader
// resigns (its campaign is cancelled, which releases the lease and notifies)
// a new leader with a higher epoch, then after the next leader is cut off
// (its lease expired under it, which notifies nobody: only polling sees it)
// yet another one. Every held value it sees names a candidate, and the
// epochs it sees only rise.
func TestObserveFollowsFailovers(t *testing.T) {
	pool := pgtest.Pool(t)
	key := uniqueKey(t)
	opts := []pglease.Option{pglease.WithWakeOnRelease(), pglease.ObserveIntervalForTest(50 * time.Millisecond)}
	observer := newClient(t, pool, opts...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := observer.Observe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := next(t, ch, "the initial state", func(pglease.Holder) bool { return true }); h.Held || h.Key != key {
		t.Fatalf("initial state of an unused key: %+v, want not held", h)
	}

	var (
		wg      sync.WaitGroup
		cancels = map[string]context.CancelFunc{} // by owner label
	)
	for i := range 3 {
		owner := fmt.Sprintf("candidate-%d", i)
		c := newClient(t, pool, append(opts, pglease.WithOwner(owner),
			pglease.WithBackoff(5*time.Millisecond, 50*time.Millisecond),
			pglease.WithRenewInterval(30*time.Millisecond))...)
		cctx, ccancel := context.WithCancel(ctx)
		cancels[owner] = ccancel
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.Campaign(cctx, key, 300*time.Millisecond, func(ctx context.Context, term *pglease.Lease) error {
				<-ctx.Done()
				return nil
			})
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s: Campaign returned %v, want context.Canceled", owner, err)
			}
		}()
	}
	defer func() {
		cancel()
		wg.Wait()
	}()

	var all []pglease.Holder
	var first, second pglease.Holder
	pgtest.Step(t, "the observer sees the first leader", func(t *testing.T) {
		var seen []pglease.Holder
		first, seen = next(t, ch, "the first leader", func(h pglease.Holder) bool { return h.Held })
		all = append(all, seen...)
		if _, ok := cancels[first.Owner]; !ok || first.Fence <= 0 || first.Since.IsZero() {
			t.Fatalf("first leader %+v: not a candidate, or no epoch or start", first)
		}
	})

	pgtest.Step(t, "failover 1, the leader resigns", func(t *testing.T) {
		cancels[first.Owner]()
		var seen []pglease.Holder
		second, seen = next(t, ch, "a leader after the resignation", func(h pglease.Holder) bool { return h.Held && h.Fence != first.Fence })
		all = append(all, seen...)
		if second.Owner == first.Owner || second.Fence <= first.Fence {
			t.Fatalf("after %s (epoch %d) resigned, observer saw %+v: want another candidate with a higher epoch", first.Owner, first.Fence, second)
		}
		if _, ok := cancels[second.Owner]; !ok {
			t.Fatalf("second leader %+v is not a candidate", second)
		}
	})

	pgtest.Step(t, "failover 2, the leader is cut off", func(t *testing.T) {
		// Its lease expires under it (as a lost renewal would end it); expiry
		// sends no notification.
		if _, err := pool.Exec(ctx, "UPDATE lock_leases SET expires_at = now() WHERE lock_key = $1 AND fence = $2", key, second.Fence); err != nil {
			t.Fatal(err)
		}
		third, seen := next(t, ch, "a leader after the cut-off", func(h pglease.Holder) bool { return h.Held && h.Fence != second.Fence })
		all = append(all, seen...)
		if third.Fence <= second.Fence {
			t.Fatalf("after epoch %d was cut off, observer saw %+v: want a higher epoch", second.Fence, third)
		}
	})

	t.Run("every value names a candidate and epochs only rise", func(t *testing.T) {
		var lastFence int64
		for i, h := range all {
			if h.Key != key {
				t.Fatalf("value %d is for key %q: %+v", i, h.Key, h)
			}
			if h.Held {
				if _, ok := cancels[h.Owner]; !ok {
					t.Fatalf("value %d names %q, not a candidate: %+v", i, h.Owner, all)
				}
			}
			if h.Fence < lastFence {
				t.Fatalf("epochs went backwards: %+v", all)
			}
			lastFence = h.Fence
		}
	})
	t.Run("no value repeats the one before", func(t *testing.T) {
		for i := 1; i < len(all); i++ {
			if all[i].Fence == all[i-1].Fence && all[i].Held == all[i-1].Held {
				t.Fatalf("value %d repeats value %d (renewals are not changes): %+v", i, i-1, all)
			}
		}
	})
}

// A release is seen as "no holder" with the last fence, and a reader that
// falls behind gets the latest state, not a backlog.
func TestObserveReleaseAndSlowReader(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	key := uniqueKey(t)
	c := newClient(t, pool, pglease.WithOwner("holder"), pglease.ObserveIntervalForTest(20*time.Millisecond))
	l, err := c.TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := c.Observe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	h := <-ch // the first value is there at once
	if !h.Held || h.Owner != "holder" || h.Fence != l.Fence() || h.Remaining <= 0 {
		t.Fatalf("initial: %+v, want held by holder with fence %d", h, l.Fence())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if h, _ = next(t, ch, "the release", func(pglease.Holder) bool { return true }); h.Held || h.Fence != l.Fence() || h.Owner != "holder" {
		t.Fatalf("after release: %+v, want not held, last fence %d", h, l.Fence())
	}

	// Three more terms while nobody reads; then, once the observer has had
	// time to poll the final state several times, one value waits: the last.
	var final int64
	for range 3 {
		l, err := c.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(60 * time.Millisecond) // let the observer see the term
		final = l.Fence()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond) // the point: the observer polls while nobody reads
	h = <-ch
	if h.Held || h.Fence != final {
		t.Fatalf("slow reader got %+v, want the latest state: released, fence %d", h, final)
	}
	select {
	case h := <-ch:
		t.Fatalf("a second value was waiting (a backlog): %+v", h)
	case <-time.After(100 * time.Millisecond):
	}
}

// Ending ctx closes the channel; so does closing the client, without
// waiting for ctx.
func TestObserveEnds(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	for _, how := range []string{"ctx", "close"} {
		t.Run(how, func(t *testing.T) {
			c, err := pglease.New(pool, pglease.WithWakeOnRelease())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ch, err := c.Observe(ctx, uniqueKey(t))
			if err != nil {
				t.Fatal(err)
			}
			<-ch
			if how == "ctx" {
				cancel()
			} else {
				c.Close() // returns only after the observer's goroutine ended
			}
			select {
			case h, ok := <-ch:
				if ok {
					t.Fatalf("value after the end: %+v", h)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("channel not closed 5s after the end")
			}
			if how == "close" {
				if _, err := c.Observe(context.Background(), "k"); !errors.Is(err, pglease.ErrClosed) {
					t.Fatalf("Observe after Close: %v, want ErrClosed", err)
				}
			}
		})
	}
}

func TestObserveRefusesBadInput(t *testing.T) {
	t.Parallel()
	c := newClient(t, pgtest.Pool(t))
	for _, key := range []string{"", "nul\x00byte", string([]byte{0xff})} {
		if ch, err := c.Observe(context.Background(), key); !errors.Is(err, pgfence.ErrInvalidInput) || ch != nil {
			t.Errorf("Observe(%q) = %v, %v; want pgfence.ErrInvalidInput", key, ch, err)
		}
	}
}

// With WithWakeOnRelease, a release is seen at once, not at the next poll:
// the observer's poll interval here is longer than the test.
func TestObserveWakesOnRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	key := uniqueKey(t)
	holder := newClient(t, pool, pglease.WithWakeOnRelease())
	observer := newClient(t, pool, pglease.WithWakeOnRelease(), pglease.ObserveIntervalForTest(time.Hour))
	l, err := holder.TryAcquire(ctx, key, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := observer.Observe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if h := <-ch; !h.Held || h.Fence != l.Fence() {
		t.Fatalf("initial: %+v, want held with fence %d", h, l.Fence())
	}
	for deadline := time.Now().Add(10 * time.Second); pglease.ListenerPID(observer) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) { // a release before LISTEN would go unheard
			t.Fatal("the listener did not start in 10s")
		}
	}
	start := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	h, _ := next(t, ch, "the release", func(pglease.Holder) bool { return true })
	if h.Held || h.Fence != l.Fence() {
		t.Fatalf("after release: %+v, want not held, fence %d", h, l.Fence())
	}
	t.Logf("release seen after %v", time.Since(start))
}

// A sweep that deletes an ended lease's row changes nothing an observer
// sees: the last grant's fence still stands (a 0 would run fences
// backwards), and the next grant comes with a larger one. The sweep deletes
// every expired row, so the test has a schema of its own.
func TestObserveKeepsFenceAcrossSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.SchemaPool(t)
	key := uniqueKey(t)
	c := newClient(t, pool, pglease.ObserveIntervalForTest(20*time.Millisecond))
	l, err := c.TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := c.Observe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if h := <-ch; !h.Held || h.Fence != l.Fence() {
		t.Fatalf("first: %+v, want held with fence %d", h, l.Fence())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if h := <-ch; h.Held || h.Fence != l.Fence() {
		t.Fatalf("after release: %+v, want not held with fence %d", h, l.Fence())
	}
	waitUntil(t, "the released row is sweepable with grace 0", func() bool {
		var past bool
		err := pool.QueryRow(ctx, "SELECT expires_at < now() FROM lock_leases WHERE lock_key = $1", key).Scan(&past)
		return err == nil && past
	})
	if n, err := c.SweepExpired(ctx, 0); err != nil || n < 1 {
		t.Fatalf("SweepExpired = %d, %v; want the released row deleted", n, err)
	}
	select {
	case h := <-ch:
		t.Fatalf("the sweep was reported as a change: %+v", h)
	case <-time.After(150 * time.Millisecond): // several polls
	}
	l2, err := c.TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	if h := <-ch; !h.Held || h.Fence != l2.Fence() || h.Fence <= l.Fence() {
		t.Fatalf("after the next grant: %+v, want held with fence %d > %d", h, l2.Fence(), l.Fence())
	}
}
