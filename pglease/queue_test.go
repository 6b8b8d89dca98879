package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// A holder keeps a key for 1.5 s while five fair waiters, each its own
// client and pool, start 200 ms apart: they are granted the key in the
// order they started waiting, every time, with and without wake-on-release.
func TestFairWaitingOrder(t *testing.T) {
	for _, wake := range []bool{false, true} {
		t.Run(fmt.Sprintf("wake=%v", wake), func(t *testing.T) {
			ctx := context.Background()
			opts := []pglease.Option{pglease.WithFairWaiting(), pglease.WithBackoff(5*time.Millisecond, 100*time.Millisecond)}
			if wake {
				opts = append(opts, pglease.WithWakeOnRelease())
			}
			key := uniqueKey(t)
			holder := newClient(t, pgtest.Pool(t), opts...)
			h, err := holder.TryAcquire(ctx, key, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var order []int
			var wg sync.WaitGroup
			for i := range 5 {
				c := newClient(t, pgtest.Pool(t), opts...)
				wg.Go(func() {
					err := c.Do(ctx, key, 10*time.Second, func(ctx context.Context, l *pglease.Lease) error {
						mu.Lock()
						order = append(order, i+1)
						mu.Unlock()
						time.Sleep(20 * time.Millisecond)
						return nil
					})
					if err != nil {
						t.Error(err)
					}
				})
				time.Sleep(200 * time.Millisecond)
			}
			time.Sleep(500 * time.Millisecond)
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			if fmt.Sprint(order) != "[1 2 3 4 5]" {
				t.Fatalf("granted in the order %v, want [1 2 3 4 5]", order)
			}
		})
	}
}

// A fair waiter that gives up leaves the queue at once: the waiter behind it
// is granted the key as soon as it is released, not after the first
// waiter's place expires. TryAcquire does not queue.
func TestFairWaiterGivesUp(t *testing.T) {
	ctx := context.Background()
	opts := []pglease.Option{pglease.WithFairWaiting(), pglease.WithBackoff(5*time.Millisecond, 50*time.Millisecond)}
	key := uniqueKey(t)
	c := newClient(t, pgtest.Pool(t), opts...)
	h, err := c.TryAcquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	quitter, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	gaveUp := make(chan error, 1)
	go func() { _, err := c.Acquire(quitter, key, 10*time.Second); gaveUp <- err }()
	time.Sleep(100 * time.Millisecond)
	got := make(chan *pglease.Lease, 1)
	go func() {
		l, err := newClient(t, pgtest.Pool(t), opts...).Acquire(ctx, key, 10*time.Second)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	if err := <-gaveUp; !errors.Is(err, pglease.ErrNotAcquired) {
		t.Fatalf("the first waiter: %v", err)
	}
	if _, err := c.TryAcquire(ctx, key, time.Second); !errors.Is(err, pglease.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held key: %v", err)
	}
	released := time.Now()
	h.Release(ctx)
	select {
	case l := <-got:
		if l != nil {
			l.Release(ctx)
		}
		if d := time.Since(released); d > time.Second {
			t.Fatalf("the second waiter was granted %v after the release: the first one's place held it up", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second waiter was not granted the key")
	}
}
