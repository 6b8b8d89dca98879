package pglease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// Three shared leases at once; the exclusive lease is refused while any is
// held, and Acquire returns only after the last one ends; while it
// waits, no new shared lease is granted (writer preference); every grant's
// fence is above every earlier grant's of either kind.
func TestSharedExclusive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newClient(t, pgtest.Pool(t), pglease.WithBackoff(time.Millisecond, 20*time.Millisecond))
	key := uniqueKey(t)
	var readers []*pglease.Lease
	var last int64
	pgtest.Step(t, "shared leases are granted together, with rising fences", func(t *testing.T) {
		for range 3 {
			l, err := c.TryAcquire(ctx, key, 5*time.Second, pglease.Shared())
			if err != nil {
				t.Fatal(err)
			}
			if l.Kind() != pglease.Shared() || l.Fence() <= last {
				t.Fatalf("shared lease: shared %v fence %d after %d", l.Kind() == pglease.Shared(), l.Fence(), last)
			}
			last = l.Fence()
			readers = append(readers, l)
		}
	})
	pgtest.Step(t, "TryAcquire is refused and takes no place", func(t *testing.T) {
		if _, err := c.TryAcquire(ctx, key, 5*time.Second); !errors.Is(err, pgfence.ErrNotAcquired) {
			t.Fatalf("exclusive while shared are held: %v", err)
		}
		extra, err := c.TryAcquire(ctx, key, 5*time.Second, pglease.Shared())
		if err != nil {
			t.Fatalf("shared after a refused TryAcquire: %v", err)
		}
		readers = append(readers, extra)
	})

	got := make(chan *pglease.Lease, 1)
	go func() {
		l, err := c.Acquire(ctx, key, 5*time.Second)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	pgtest.Step(t, "once the writer waits, new readers are refused", func(t *testing.T) {
		deadline := time.Now().Add(5 * time.Second)
		for {
			l, err := c.TryAcquire(ctx, key, 5*time.Second, pglease.Shared())
			if errors.Is(err, pgfence.ErrNotAcquired) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			readers = append(readers, l) // the writer was not waiting yet
			last = l.Fence()
			if time.Now().After(deadline) {
				t.Fatal("shared leases still granted 5 s after an exclusive waiter started")
			}
			time.Sleep(5 * time.Millisecond) // polled: the writer's place is not signalled
		}
	})
	var w *pglease.Lease
	pgtest.Step(t, "the writer is granted only after the last reader ends", func(t *testing.T) {
		for i, r := range readers {
			select {
			case l := <-got:
				t.Fatalf("exclusive granted (fence %d) with %d shared leases still held", l.Fence(), len(readers)-i)
			case <-time.After(50 * time.Millisecond):
			}
			if err := r.Release(ctx); err != nil {
				t.Fatal(err)
			}
			last = max(last, r.Fence())
		}
		select {
		case w = <-got:
		case <-time.After(5 * time.Second):
			t.Fatal("exclusive not granted after the last shared lease ended")
		}
		if w == nil {
			t.FailNow()
		}
		if w.Kind() == pglease.Shared() || w.Fence() <= last {
			t.Fatalf("exclusive lease: shared %v, fence %d after %d", w.Kind() == pglease.Shared(), w.Fence(), last)
		}
	})
	pgtest.Step(t, "the exclusive lease excludes readers and writers", func(t *testing.T) {
		if _, err := c.TryAcquire(ctx, key, 5*time.Second, pglease.Shared()); !errors.Is(err, pgfence.ErrNotAcquired) {
			t.Fatalf("shared while exclusive is held: %v", err)
		}
		if _, err := c.TryAcquire(ctx, key, 5*time.Second); !errors.Is(err, pgfence.ErrNotAcquired) {
			t.Fatalf("second exclusive: %v", err)
		}
	})
	t.Run("a reader after the writer has a higher fence", func(t *testing.T) {
		if err := w.Release(ctx); err != nil {
			t.Fatal(err)
		}
		r, err := c.TryAcquire(ctx, key, 5*time.Second, pglease.Shared())
		if err != nil {
			t.Fatal(err)
		}
		if r.Fence() <= w.Fence() {
			t.Fatalf("shared fence %d after exclusive %d", r.Fence(), w.Fence())
		}
		r.Release(ctx)
	})
}

// An exclusive waiter that gives up (its context ends) leaves the queue at
// once: shared leases are granted again without waiting for its place to
// expire.
func TestExclusiveWaiterGivesUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newClient(t, pgtest.Pool(t), pglease.WithBackoff(time.Millisecond, 20*time.Millisecond))
	key := uniqueKey(t)
	r, err := c.TryAcquire(ctx, key, 5*time.Second, pglease.Shared())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release(ctx)
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := c.Acquire(wctx, key, 5*time.Second); !errors.Is(err, pgfence.ErrNotAcquired) {
		t.Fatalf("exclusive waiter: %v", err)
	}
	l, err := c.TryAcquire(ctx, key, 5*time.Second, pglease.Shared())
	if err != nil {
		t.Fatalf("shared after the exclusive waiter gave up: %v", err)
	}
	l.Release(ctx)
}
