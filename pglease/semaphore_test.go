package pglease_test

import (
	"context"
	"errors"
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

// semaphoreKey is key taken as one of permits permits through c, so that the
// tests of permits read as the tests of one semaphore.
type semaphoreKey struct {
	c       *pglease.Client
	key     string
	permits int
}

func semaphore(t *testing.T, c *pglease.Client, key string, permits int) semaphoreKey {
	return semaphoreKey{c, key, permits}
}

func (s semaphoreKey) TryAcquire(ctx context.Context, ttl time.Duration) (*pglease.Lease, error) {
	return s.c.TryAcquire(ctx, s.key, ttl, pglease.Permits(s.permits))
}

func (s semaphoreKey) Acquire(ctx context.Context, ttl time.Duration) (*pglease.Lease, error) {
	return s.c.Acquire(ctx, s.key, ttl, pglease.Permits(s.permits))
}

func (s semaphoreKey) Do(ctx context.Context, ttl time.Duration, fn func(context.Context, *pglease.Lease) error) error {
	return s.c.Do(ctx, s.key, ttl, fn, pglease.Permits(s.permits))
}

// Three permits: three TryAcquires get slots 0, 1, 2 with rising fences;
// the fourth is refused at once; a release frees its slot for the next
// acquirer, with a new fence; callers asking for another number of permits
// are refused while permits are held, and the number changes once none is.
func TestSemaphorePermitsSlotsAndMismatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newClient(t, pgtest.Pool(t))
	key := uniqueKey(t)
	s := semaphore(t, c, key, 3)
	var held []*pglease.Lease
	pgtest.Step(t, "three permits take slots 0, 1, 2 with rising fences; a fourth is refused", func(t *testing.T) {
		for i := range 3 {
			l, err := s.TryAcquire(ctx, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if l.Slot() != i || l.Kind() != pglease.Permits(3) {
				t.Fatalf("permit %d: slot %d, kind %v of %d", i, l.Slot(), l.Kind(), l.Kind().Permits())
			}
			if i > 0 && l.Fence() <= held[i-1].Fence() {
				t.Fatalf("fence %d after %d", l.Fence(), held[i-1].Fence())
			}
			held = append(held, l)
		}
		if _, err := s.TryAcquire(ctx, 5*time.Second); !errors.Is(err, pgfence.ErrNotAcquired) {
			t.Fatalf("fourth permit of three: %v, want pgfence.ErrNotAcquired", err)
		}
	})
	pgtest.Step(t, "a plain lease of the key is refused while permits are held", func(t *testing.T) {
		if _, err := c.TryAcquire(ctx, key, 5*time.Second); !errors.Is(err, pgfence.ErrNotAcquired) {
			t.Fatalf("a plain lease of a key held as permits: %v, want pgfence.ErrNotAcquired", err)
		}
	})
	pgtest.Step(t, "another number of permits is refused while permits are held", func(t *testing.T) {
		for _, n := range []int{2, 4} {
			if _, err := semaphore(t, c, key, n).TryAcquire(ctx, 5*time.Second); !errors.Is(err, pglease.ErrPermitsMismatch) {
				t.Fatalf("%d permits on a key held with 3: %v, want ErrPermitsMismatch", n, err)
			}
		}
		if _, err := c.TryAcquire(ctx, key, 5*time.Second, pglease.Shared()); !errors.Is(err, pglease.ErrPermitsMismatch) {
			t.Fatalf("shared lease on a semaphore's key: %v, want ErrPermitsMismatch", err)
		}
	})
	pgtest.Step(t, "a release frees its slot for the next acquirer, with a new fence", func(t *testing.T) {
		if err := held[1].Release(ctx); err != nil {
			t.Fatal(err)
		}
		l, err := s.TryAcquire(ctx, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if l.Slot() != 1 || l.Fence() <= held[2].Fence() {
			t.Fatalf("after slot 1's release: slot %d, fence %d (last fence %d)", l.Slot(), l.Fence(), held[2].Fence())
		}
		held[1] = l
	})
	t.Run("the number changes once no permit is held", func(t *testing.T) {
		for _, h := range held {
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		l, err := semaphore(t, c, key, 5).TryAcquire(ctx, 5*time.Second)
		if err != nil {
			t.Fatalf("5 permits once none is held: %v", err)
		}
		l.Release(ctx)
	})
}

// A permit whose holder stopped renewing (a dead client) returns at its TTL
// by the database clock; renewing it afterwards fails and never resurrects it.
func TestSemaphoreDeadHolderReturnsAtTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dead := newClient(t, pgtest.Pool(t), pglease.WithoutAutoRenew())
	live := newClient(t, pgtest.Pool(t))
	key := uniqueKey(t)
	old, err := semaphore(t, dead, key, 1).TryAcquire(ctx, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s := semaphore(t, live, key, 1)
	if _, err := s.TryAcquire(ctx, time.Second); !errors.Is(err, pgfence.ErrNotAcquired) {
		t.Fatalf("while held: %v", err)
	}
	l, err := s.Acquire(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if l.Fence() <= old.Fence() {
		t.Fatalf("fence %d after %d", l.Fence(), old.Fence())
	}
	if err := old.Renew(ctx); !errors.Is(err, pgfence.ErrLeaseLost) {
		t.Fatalf("renewing the expired permit: %v, want pgfence.ErrLeaseLost", err)
	}
	if err := old.Release(ctx); !errors.Is(err, pgfence.ErrLeaseLost) {
		t.Fatalf("releasing the expired permit: %v, want pgfence.ErrLeaseLost", err)
	}
	if context.Cause(l.Context()) != nil {
		t.Fatalf("the new holder's permit ended: %v", context.Cause(l.Context()))
	}
}

// 16 goroutines of two clients take the 4 permits of a key through Do: never
// more than 4 inside at once, no two inside on one slot, and 4 at the peak.
func TestSemaphoreDoConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	key := uniqueKey(t)
	clients := []*pglease.Client{
		newClient(t, pgtest.Pool(t), pglease.WithBackoff(time.Millisecond, 10*time.Millisecond)),
		newClient(t, pgtest.Pool(t), pglease.WithBackoff(time.Millisecond, 10*time.Millisecond)),
	}
	var inside, peak atomic.Int32
	var slots [4]atomic.Int32
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			s := semaphore(t, clients[g%2], key, 4)
			for range 5 {
				err := s.Do(ctx, 5*time.Second, func(ctx context.Context, l *pglease.Lease) error {
					n := inside.Add(1)
					defer inside.Add(-1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					if slots[l.Slot()].Add(1) != 1 {
						t.Errorf("two holders inside on slot %d", l.Slot())
					}
					defer slots[l.Slot()].Add(-1)
					time.Sleep(20 * time.Millisecond) // long enough for the others to fill every permit
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if peak.Load() != 4 {
		t.Fatalf("peak holders inside: %d, want 4", peak.Load())
	}
}

// Bad input is refused before anything is sent.
func TestSemaphoreInput(t *testing.T) {
	t.Parallel()
	c := newClient(t, pgtest.Pool(t))
	for _, n := range []int{0, -1, pglease.MaxPermits + 1} {
		if _, err := c.TryAcquire(context.Background(), "k", time.Second, pglease.Permits(n)); !errors.Is(err, pgfence.ErrInvalidInput) {
			t.Errorf("%d permits: %v", n, err)
		}
	}
	if _, err := c.TryAcquire(context.Background(), "", time.Second, pglease.Permits(2)); !errors.Is(err, pgfence.ErrInvalidInput) {
		t.Errorf("empty key: %v", err)
	}
	if _, err := c.TryAcquire(context.Background(), "k", time.Second, pglease.Shared(), pglease.Permits(2)); !errors.Is(err, pgfence.ErrInvalidInput) {
		t.Errorf("two kinds: %v", err)
	}
	s := semaphore(t, c, "k", 2)
	if _, err := s.TryAcquire(context.Background(), time.Nanosecond); !errors.Is(err, pgfence.ErrInvalidInput) {
		t.Errorf("1 ns TTL: %v", err)
	}
	if err := s.Do(context.Background(), time.Second, nil); !errors.Is(err, pgfence.ErrInvalidInput) {
		t.Errorf("nil fn: %v", err)
	}
}

// A client WithSchema takes permits, shared leases and key sets from its
// schema's objects, whatever its connections' search_path: the default
// schema's tables are untouched.
func TestCoordinationKindsWithSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t)
	c := newClient(t, pool, pglease.WithSchema(schema))
	key := uniqueKey(t)
	p, err := semaphore(t, c, key, 2).TryAcquire(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.TryAcquire(ctx, key+"/rw", 5*time.Second, pglease.Shared())
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.TryAcquireSet(ctx, []string{key + "/a", key + "/b"}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var inSchema, inDefault int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+schema+`.lock_leases WHERE lock_key LIKE $1 || '%' AND owner_token <> ''),
		(SELECT count(*) FROM public.lock_leases WHERE lock_key LIKE $1 || '%')`, key).Scan(&inSchema, &inDefault); err != nil {
		t.Fatal(err)
	}
	if inSchema != 4 || inDefault != 0 {
		t.Fatalf("rows in %s: %d (want 4), in public: %d (want 0)", schema, inSchema, inDefault)
	}
	for _, err := range []error{p.Release(ctx), r.Release(ctx), s.Release(ctx)} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// The SQL forms share a semaphore with Go clients: permits taken through
// pgfence_acquire_permit count against Go's, a disagreement about the
// number is refused, and renew and release by key and fence work (and
// never resurrect or touch another grant).
func TestSemaphoreSQLForms(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := newClient(t, pool)
	key := uniqueKey(t)
	var slot int32
	var fence int64
	if err := pool.QueryRow(ctx, `SELECT slot, fence FROM pgfence_acquire_permit($1, 2, '5s', 'sql-client')`, key).Scan(&slot, &fence); err != nil {
		t.Fatal(err)
	}
	goPermit, err := semaphore(t, c, key, 2).TryAcquire(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if goPermit.Slot() == int(slot) || goPermit.Fence() <= fence {
		t.Fatalf("Go's permit: slot %d fence %d; SQL's: slot %d fence %d", goPermit.Slot(), goPermit.Fence(), slot, fence)
	}
	if n := rows(t, pool, `SELECT * FROM pgfence_acquire_permit($1, 2, '5s', 'sql-client')`, key); n != 0 {
		t.Fatalf("a third permit of two through SQL: %d rows", n)
	}
	if _, err := pool.Exec(ctx, `SELECT * FROM pgfence_acquire_permit($1, 3, '5s', 'sql-client')`, key); err == nil || !strings.Contains(err.Error(), "PF007") {
		t.Fatalf("3 permits through SQL on a key held with 2: %v, want SQLSTATE PF007", err)
	}
	if _, err := pool.Exec(ctx, `SELECT * FROM pgfence_acquire_permit('', 2, '5s', 'x')`); err == nil || !strings.Contains(err.Error(), "PF005") {
		t.Fatalf("empty key through SQL: %v, want SQLSTATE PF005", err)
	}
	if n := rows(t, pool, `SELECT * FROM pgfence_renew($1, $2, '5s')`, key, fence); n != 1 {
		t.Fatalf("renew through SQL: %d rows", n)
	}
	if n := rows(t, pool, `SELECT * FROM pgfence_release($1, $2)`, key, goPermit.Fence()+1000); n != 0 {
		t.Fatal("a release with a fence no grant carries released something")
	}
	if n := rows(t, pool, `SELECT * FROM pgfence_release($1, $2)`, key, fence); n != 1 {
		t.Fatalf("release through SQL: %d rows", n)
	}
	if n := rows(t, pool, `SELECT * FROM pgfence_renew($1, $2, '5s')`, key, fence); n != 0 {
		t.Fatal("renew after release resurrected the permit")
	}
	if context.Cause(goPermit.Context()) != nil {
		t.Fatalf("Go's permit ended: %v", context.Cause(goPermit.Context()))
	}
	again, err := semaphore(t, c, key, 2).TryAcquire(ctx, 5*time.Second)
	if err != nil || again.Slot() != int(slot) {
		t.Fatalf("after the SQL release: %v, slot %v", err, again)
	}
}

func rows(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	r, err := pool.Query(context.Background(), sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for r.Next() {
		n++
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}
