package pglease_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// A set {a, b} held: b alone is refused; {c, a} is refused, names a as held,
// and leaves c free; each key of a set has its own fence; releasing the set
// frees both.
func TestKeySetAllOrNothing(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, pgtest.Pool(t))
	other := newClient(t, pgtest.Pool(t))
	p := uniqueKey(t)
	a, b, cc := p+"/a", p+"/b", p+"/c"
	set, err := c.TryAcquireSet(ctx, []string{b, a}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := set.Keys(); got[0] != a || got[1] != b {
		t.Fatalf("keys %q", got)
	}
	fa, fb := set.Lease(a).Fence(), set.Lease(b).Fence()
	if fa == fb || fa <= 0 || fb <= 0 {
		t.Fatalf("fences %d and %d", fa, fb)
	}
	if _, err := other.TryAcquire(ctx, b, 5*time.Second); !errors.Is(err, pglease.ErrNotAcquired) {
		t.Fatalf("b alone while the set holds it: %v", err)
	}
	_, err = other.TryAcquireSet(ctx, []string{cc, a}, 5*time.Second)
	if !errors.Is(err, pglease.ErrNotAcquired) || !strings.Contains(err.Error(), a) || strings.Contains(err.Error(), cc+"'") {
		t.Fatalf("{c, a} while a is held: %v, want ErrNotAcquired naming only a", err)
	}
	l, err := other.TryAcquire(ctx, cc, 5*time.Second)
	if err != nil {
		t.Fatalf("c after the refused set: %v (the refused attempt left a lease)", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if set.Context().Err() == nil {
		t.Fatal("the set's context did not end on Release")
	}
	set2, err := other.TryAcquireSet(ctx, []string{a, b, cc}, 5*time.Second)
	if err != nil {
		t.Fatalf("{a, b, c} after the release: %v", err)
	}
	if set2.Lease(a).Fence() <= fa || set2.Lease(b).Fence() <= fb {
		t.Fatal("fences did not rise")
	}
	set2.Release(ctx)
}

// 16 goroutines of two clients ask for random overlapping sets of 5 keys, in
// random orders, through AcquireSet: no key ever has two holders inside, and
// no acquisition fails (a deadlock between two sets would fail one with
// SQLSTATE 40P01 after deadlock_timeout).
func TestKeySetOverlappingNoDeadlock(t *testing.T) {
	ctx := context.Background()
	clients := []*pglease.Client{
		newClient(t, pgtest.Pool(t), pglease.WithBackoff(time.Millisecond, 10*time.Millisecond)),
		newClient(t, pgtest.Pool(t), pglease.WithBackoff(time.Millisecond, 10*time.Millisecond)),
	}
	p := uniqueKey(t)
	keys := []string{p + "/0", p + "/1", p + "/2", p + "/3", p + "/4"}
	var inside [5]atomic.Int32
	var sets atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for range 8 {
				idx := rand.Perm(5)[:2+rand.IntN(3)]
				var want []string
				for _, i := range idx {
					want = append(want, keys[i])
				}
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				s, err := clients[g%2].AcquireSet(wctx, want, 5*time.Second)
				cancel()
				if err != nil {
					t.Error(err)
					return
				}
				for _, i := range idx {
					if inside[i].Add(1) != 1 {
						t.Errorf("key %d has two holders", i)
					}
				}
				time.Sleep(time.Millisecond)
				for _, i := range idx {
					inside[i].Add(-1)
				}
				if err := s.Release(ctx); err != nil {
					t.Error(err)
				}
				sets.Add(1)
			}
		})
	}
	wg.Wait()
	if sets.Load() != 16*8 {
		t.Fatalf("%d sets held, want %d", sets.Load(), 16*8)
	}
}

// Bad key sets are refused before anything is sent.
func TestKeySetInput(t *testing.T) {
	c := newClient(t, pgtest.Pool(t))
	ctx := context.Background()
	for name, keys := range map[string][]string{
		"empty": nil, "duplicate": {"x", "y", "x"}, "empty key": {"x", ""},
		"too many": make([]string, pglease.MaxSetKeys+1),
	} {
		if _, err := c.TryAcquireSet(ctx, keys, time.Second); !errors.Is(err, pglease.ErrInvalidInput) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
