package pglease_test

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// kindTaker takes one kind of lease of a key, trying once or waiting.
type kindTaker struct {
	name string
	take func(ctx context.Context, c *pglease.Client, key string, wait bool) (*pglease.Lease, error)
}

var kindTakers = []kindTaker{
	{"plain", func(ctx context.Context, c *pglease.Client, key string, wait bool) (*pglease.Lease, error) {
		if wait {
			return c.Acquire(ctx, key, 10*time.Second)
		}
		return c.TryAcquire(ctx, key, 10*time.Second)
	}},
	{"shared", func(ctx context.Context, c *pglease.Client, key string, wait bool) (*pglease.Lease, error) {
		if wait {
			return c.Acquire(ctx, key, 10*time.Second, pglease.Shared())
		}
		return c.TryAcquire(ctx, key, 10*time.Second, pglease.Shared())
	}},
	{"permit", func(ctx context.Context, c *pglease.Client, key string, wait bool) (*pglease.Lease, error) {
		if wait {
			return c.Acquire(ctx, key, 10*time.Second, pglease.Permits(3))
		}
		return c.TryAcquire(ctx, key, 10*time.Second, pglease.Permits(3))
	}},
}

// A key is one lock: for every pair of kinds, a holder of the first kind
// keeps out a second kind that it excludes (refused as held, or with
// ErrPermitsMismatch naming the kind it is held in), and only two shared
// leases or two permits of the same semaphore share the key. A key set
// member is the exclusive kind and conflicts with every kind on it.
func TestOneKeyEveryPairOfKinds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := newClient(t, pool)
	for _, first := range kindTakers {
		for _, second := range kindTakers {
			t.Run(first.name+"/"+second.name, func(t *testing.T) {
				key := uniqueKey(t)
				l, err := first.take(ctx, c, key, false)
				if err != nil {
					t.Fatal(err)
				}
				defer l.Release(ctx)
				l2, err := second.take(ctx, c, key, false)
				shareable := first.name == second.name && first.name != "plain"
				switch {
				case shareable && err != nil:
					t.Fatalf("a second %s lease of a key held %s: %v", second.name, first.name, err)
				case shareable:
					if l2.Fence() <= l.Fence() {
						t.Fatalf("fences %d then %d", l.Fence(), l2.Fence())
					}
					l2.Release(ctx)
				case err == nil:
					l2.Release(ctx)
					t.Fatalf("%s granted beside %s on one key", second.name, first.name)
				case !errors.Is(err, pgfence.ErrNotAcquired) && !errors.Is(err, pglease.ErrPermitsMismatch):
					t.Fatalf("%s beside %s: %v, want pgfence.ErrNotAcquired or ErrPermitsMismatch", second.name, first.name, err)
				}
				if _, err := c.TryAcquireSet(ctx, []string{key, key + "/other"}, time.Second); !errors.Is(err, pgfence.ErrNotAcquired) {
					t.Fatalf("a key set with a key held %s: %v, want pgfence.ErrNotAcquired", first.name, err)
				}
			})
		}
	}
	t.Run("a key set's member excludes every kind", func(t *testing.T) {
		key := uniqueKey(t)
		s, err := c.TryAcquireSet(ctx, []string{key, key + "/b"}, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Release(ctx)
		for _, k := range kindTakers {
			if l, err := k.take(ctx, c, key, false); err == nil {
				l.Release(ctx)
				t.Fatalf("%s granted on a key set's member", k.name)
			}
		}
	})
}

// holderBook records, on the clients' side, who holds each key in which
// kind: a holder is entered after its grant returned and leaves before its
// release is sent, so its interval lies inside the server's, and an overlap
// seen here is an overlap on the server.
type holderBook struct {
	mu    sync.Mutex
	held  map[string]map[string]int // key -> kind -> holders
	fence map[int64]bool
	bad   []string
}

func (b *holderBook) enter(key, kind string, fence int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fence[fence] {
		b.bad = append(b.bad, fmt.Sprintf("fence %d granted twice", fence))
	}
	b.fence[fence] = true
	h := b.held[key]
	if h == nil {
		h = map[string]int{}
		b.held[key] = h
	}
	for other, n := range h {
		if n > 0 && (other != kind || kind == "plain") {
			b.bad = append(b.bad, fmt.Sprintf("%q: %s granted while %d %s held", key, kind, n, other))
		}
	}
	h[kind]++
	if kind == "permit" && h[kind] > 3 {
		b.bad = append(b.bad, fmt.Sprintf("%q: %d permits of 3", key, h[kind]))
	}
}

func (b *holderBook) leave(key, kind string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held[key][kind]--
}

// Many goroutines on several clients, fair and not, take a few keys in
// every kind at random, waiting; no two holders whose kinds exclude each
// other ever hold a key at once, and no fence repeats.
func TestOneKeyContendedAcrossKinds(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	clients := []*pglease.Client{
		newClient(t, pool), newClient(t, pool),
		newClient(t, pool, pglease.WithFairWaiting()),
		newClient(t, pool, pglease.WithFairWaiting(), pglease.WithWakeOnRelease()),
	}
	prefix := uniqueKey(t)
	keys := []string{prefix + "/a", prefix + "/b"}
	book := &holderBook{held: map[string]map[string]int{}, fence: map[int64]bool{}}
	deadline := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	var mu sync.Mutex
	grants, mismatches := 0, 0
	var failure error
	for g := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[g%len(clients)]
			for time.Now().Before(deadline) {
				key := keys[mrand.IntN(len(keys))]
				k := kindTakers[mrand.IntN(len(kindTakers))]
				actx, cancel := context.WithTimeout(ctx, 5*time.Second)
				l, err := k.take(actx, c, key, true)
				cancel()
				if errors.Is(err, pglease.ErrPermitsMismatch) {
					mu.Lock()
					mismatches++
					mu.Unlock()
					continue
				}
				if err != nil {
					mu.Lock()
					failure = fmt.Errorf("%s of %q: %w", k.name, key, err)
					mu.Unlock()
					return
				}
				book.enter(key, k.name, l.Fence())
				time.Sleep(time.Duration(mrand.IntN(3)) * time.Millisecond)
				book.leave(key, k.name)
				if err := l.Release(ctx); err != nil {
					mu.Lock()
					failure = fmt.Errorf("release %s of %q: %w", k.name, key, err)
					mu.Unlock()
					return
				}
				mu.Lock()
				grants++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if failure != nil {
		t.Fatal(failure)
	}
	if len(book.bad) > 0 {
		t.Fatalf("%d violations, first: %s", len(book.bad), book.bad[0])
	}
	if grants < 50 {
		t.Fatalf("only %d grants in 3 s (%d kind refusals)", grants, mismatches)
	}
	t.Logf("%d grants, %d kind refusals", grants, mismatches)
}

// Holder says which kind holds a key: the plain lease's owner, or that
// shared leases hold it, with the highest fence granted on it.
func TestHolderSaysTheKind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newClient(t, pgtest.Pool(t))
	key := uniqueKey(t)
	a, err := c.TryAcquire(ctx, key, 10*time.Second, pglease.Shared())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	b, err := c.TryAcquire(ctx, key, 10*time.Second, pglease.Shared())
	if err != nil {
		t.Fatal(err)
	}
	h, ok, err := c.Holder(ctx, key)
	if err != nil || !ok || h.Kind != pglease.Shared() || !h.Held || h.Fence != b.Fence() || h.Owner != "" {
		t.Fatalf("Holder of a key held shared: %+v %v %v", h, ok, err)
	}
	b.Release(ctx)
	a.Release(ctx)
	if h, _, err := c.Holder(ctx, key); err != nil || h.Held {
		t.Fatalf("Holder after both shared leases were released: %+v %v", h, err)
	}
	l, err := c.TryAcquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if h, _, err := c.Holder(ctx, key); err != nil || h.Kind != pglease.Exclusive() || h.Owner != c.Owner() || h.Fence != l.Fence() {
		t.Fatalf("Holder of a plain lease: %+v %v", h, err)
	}
}

// Holder and Observe name every holder of a key held as permits or shared:
// each one's owner, fence, slot and expiry, from one read; a permit given back
// is a change Observe reports, with the holders left.
func TestHolderListsEveryHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	for _, kind := range []pglease.Kind{pglease.Permits(3), pglease.Shared()} {
		t.Run(kind.String(), func(t *testing.T) {
			key := uniqueKey(t)
			var leases []*pglease.Lease
			for i := range 3 {
				c := newClient(t, pool, pglease.WithOwner(fmt.Sprintf("holder-%d", i)))
				l, err := c.TryAcquire(ctx, key, 10*time.Second, kind)
				if err != nil {
					t.Fatal(err)
				}
				defer l.Release(ctx)
				leases = append(leases, l)
			}
			watcher := newClient(t, pool)
			h, ok, err := watcher.Holder(ctx, key)
			if err != nil || !ok || h.Kind != kind || !h.Held || h.Owner != "" || h.Fence != leases[2].Fence() || len(h.Holders) != 3 {
				t.Fatalf("Holder: %+v %v %v", h, ok, err)
			}
			for i, got := range h.Holders {
				l := leases[i]
				if got.Owner != fmt.Sprintf("holder-%d", i) || got.Fence != l.Fence() || got.Slot != l.Slot() || got.Kind != kind ||
					!got.Held || got.Remaining <= 0 || got.Remaining > 10*time.Second || got.Since.IsZero() || got.Key != key {
					t.Errorf("holder %d: %+v, want the lease of fence %d in slot %d", i, got, l.Fence(), l.Slot())
				}
			}

			octx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			ch, err := watcher.Observe(octx, key)
			if err != nil {
				t.Fatal(err)
			}
			if first := <-ch; len(first.Holders) != 3 {
				t.Fatalf("Observe's first value: %+v", first)
			}
			if err := leases[1].Release(ctx); err != nil {
				t.Fatal(err)
			}
			for h := range ch {
				if len(h.Holders) == 2 {
					if !h.Held || h.Holders[0].Fence != leases[0].Fence() || h.Holders[1].Fence != leases[2].Fence() {
						t.Fatalf("after a release: %+v", h)
					}
					return
				}
			}
			t.Fatal("Observe did not report the release of one holder")
		})
	}
}
