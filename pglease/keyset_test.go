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

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// A set {a, b} held: b alone is refused; {c, a} is refused, names a as held,
// and leaves c free; each key of a set has its own fence; releasing the set
// frees both.
func TestKeySetAllOrNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newClient(t, pgtest.Pool(t))
	other := newClient(t, pgtest.Pool(t))
	p := uniqueKey(t)
	a, b, cc := p+"/a", p+"/b", p+"/c"
	set, err := c.TryAcquireSet(ctx, []string{b, a}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ls := set.Leases()
	if len(ls) != 2 || ls[0].Key() != a || ls[1].Key() != b {
		t.Fatalf("leases %v, want a then b", ls)
	}
	fa, fb := ls[0].Fence(), ls[1].Fence()
	if fa == fb || fa <= 0 || fb <= 0 {
		t.Fatalf("fences %d and %d", fa, fb)
	}
	if _, err := other.TryAcquire(ctx, b, 5*time.Second); !errors.Is(err, pgfence.ErrNotAcquired) {
		t.Fatalf("b alone while the set holds it: %v", err)
	}
	_, err = other.TryAcquireSet(ctx, []string{cc, a}, 5*time.Second)
	if !errors.Is(err, pgfence.ErrNotAcquired) || !strings.Contains(err.Error(), a) || strings.Contains(err.Error(), cc+"'") {
		t.Fatalf("{c, a} while a is held: %v, want pgfence.ErrNotAcquired naming only a", err)
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
	if leaseOn(t, set2, a).Fence() <= fa || leaseOn(t, set2, b).Fence() <= fb {
		t.Fatal("fences did not rise")
	}
	set2.Release(ctx)
}

// 16 goroutines of two clients ask for random overlapping sets of 5 keys, in
// random orders, through AcquireSet: no key ever has two holders inside, and
// no acquisition fails (a deadlock between two sets would fail one with
// SQLSTATE 40P01 after deadlock_timeout).
func TestKeySetOverlappingNoDeadlock(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
	c := newClient(t, pgtest.Pool(t))
	ctx := context.Background()
	for name, keys := range map[string][]string{
		"empty": nil, "duplicate": {"x", "y", "x"}, "empty key": {"x", ""},
		"too many": make([]string, pglease.MaxSetKeys+1),
	} {
		if _, err := c.TryAcquireSet(ctx, keys, time.Second); !errors.Is(err, pgfence.ErrInvalidInput) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A set of 5 keys is renewed in one statement and released in one: the
// statements a client sends do not grow with the set. A key expired behind
// the set's back is not resurrected by the renewal (pgfence.ErrLeaseLost for it
// alone), and a key taken by another owner meanwhile is left alone by the
// release (pgfence.ErrLeaseLost for it, the others released).
func TestKeySetRenewReleaseOneStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	counter := &queryCounter{}
	pool := pgtest.Pool(t)
	c := newClient(t, pgtest.Pool(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = counter }), pglease.WithoutAutoRenew())
	p := uniqueKey(t)
	keys := []string{p + "/1", p + "/2", p + "/3", p + "/4", p + "/5"}
	set, err := c.TryAcquireSet(ctx, keys, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Step(t, "a renewal of the set is one statement", func(t *testing.T) {
		counter.n.Store(0)
		if err := set.Renew(ctx); err != nil {
			t.Fatal(err)
		}
		if n := counter.n.Load(); n != 1 {
			t.Fatalf("renewing a set of 5 sent %d statements, want 1", n)
		}
	})
	pgtest.Step(t, "a key expired behind the set's back is lost alone, not resurrected", func(t *testing.T) {
		if _, err := pool.Exec(ctx, `UPDATE lock_leases SET expires_at = now() WHERE lock_key = $1`, keys[1]); err != nil {
			t.Fatal(err)
		}
		before := leaseOn(t, set, keys[0]).ExpiresAt()
		err := set.Renew(ctx)
		if !errors.Is(err, pgfence.ErrLeaseLost) || !strings.Contains(err.Error(), keys[1]) || strings.Contains(err.Error(), keys[0]+`"`) {
			t.Fatalf("renewing with %s expired: %v, want pgfence.ErrLeaseLost for it alone", keys[1], err)
		}
		if n := rows(t, pool, `SELECT FROM lock_leases WHERE lock_key = $1 AND expires_at > now()`, keys[1]); n != 0 {
			t.Fatalf("the expired key was resurrected")
		}
		if !leaseOn(t, set, keys[0]).ExpiresAt().After(before) {
			t.Fatal("the other keys were not renewed")
		}
	})
	otherOwner := newClient(t, pool)
	var other *pglease.Lease
	defer func() {
		if other != nil {
			other.Release(ctx)
		}
	}()
	pgtest.Step(t, "the release is one statement and leaves another owner's key alone", func(t *testing.T) {
		var err error
		other, err = otherOwner.TryAcquire(ctx, keys[1], 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		counter.n.Store(0)
		err = set.Release(ctx)
		if !errors.Is(err, pgfence.ErrLeaseLost) || !strings.Contains(err.Error(), keys[1]) {
			t.Fatalf("releasing with %s lost: %v, want pgfence.ErrLeaseLost for it", keys[1], err)
		}
		// The release, and the lost key's state (the uncommon path).
		if n := counter.n.Load(); n > 2 {
			t.Fatalf("releasing a set of 5 sent %d statements, want 1 (and 1 to tell how a key was lost)", n)
		}
		if n := rows(t, pool, `SELECT FROM lock_leases WHERE lock_key = ANY($1) AND expires_at > now()`, keys); n != 1 {
			t.Fatalf("%d keys of the set still held after its release, want 1 (the other owner's)", n)
		}
		if err := context.Cause(other.Context()); err != nil {
			t.Fatalf("the other owner's lease: %v", err)
		}
	})
	t.Run("a second Release succeeds", func(t *testing.T) {
		if err := set.Release(ctx); err != nil {
			t.Fatalf("a second Release: %v", err)
		}
	})
}

// An auto-renewed set of 5 keys (TTL 1.5 s: a renewal every 500 ms) is
// renewed in one statement per renewal, not one per key: over 3.25 s, every
// lease is still held and the client sent at most 8 statements (5 per
// renewal would be 30 or more). The TTL leaves a loaded machine 850 ms to
// be late by before a renewal misses the local deadline.
func TestKeySetAutoRenewTogether(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	counter := &queryCounter{}
	c := newClient(t, pgtest.Pool(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = counter }))
	p := uniqueKey(t)
	keys := []string{p + "/1", p + "/2", p + "/3", p + "/4", p + "/5"}
	set, err := c.TryAcquireSet(ctx, keys, 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	counter.n.Store(0)
	time.Sleep(3250 * time.Millisecond) // past twice the TTL
	if err := context.Cause(set.Context()); err != nil {
		t.Fatalf("the set was lost while auto-renewed: %v", err)
	}
	n := counter.n.Load()
	if n < 3 || n > 8 {
		t.Fatalf("%d statements in 3.25 s of auto-renewal every 500 ms, want one per renewal (about 6)", n)
	}
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if rows(t, pgtest.Pool(t), `SELECT FROM lock_leases WHERE lock_key = ANY($1) AND expires_at > now()`, keys) != 0 {
		t.Fatal("held after the release")
	}
}

// leaseOn is set's lease on key.
func leaseOn(t *testing.T, set *pglease.KeySet, key string) *pglease.Lease {
	t.Helper()
	for _, l := range set.Leases() {
		if l.Key() == key {
			return l
		}
	}
	t.Fatalf("the set holds no lease on %q", key)
	return nil
}
