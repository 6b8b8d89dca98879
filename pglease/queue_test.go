package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// A holder keeps a key while five fair waiters, each its own client and
// pool, start one after another (each once the one before has its place in
// the queue): they are granted the key in the order they started waiting,
// every time, with and without wake-on-release.
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
			pool := pgtest.Pool(t)
			places := func() (n int) {
				pool.QueryRow(ctx, `SELECT count(*) FROM pgfence_waiters WHERE lock_key = $1 AND expires_at > now()`, key).Scan(&n)
				return n
			}
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
				waitUntil(t, fmt.Sprintf("waiter %d queued", i+1), func() bool { return places() == i+1 })
			}
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
	if err := <-gaveUp; !errors.Is(err, pgfence.ErrNotAcquired) {
		t.Fatalf("the first waiter: %v", err)
	}
	if _, err := c.TryAcquire(ctx, key, time.Second); !errors.Is(err, pgfence.ErrNotAcquired) {
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

// warmPool is a pool that has connected already: a waiter's first attempt,
// which takes its place in the queue, then does not wait for a connection,
// which on a loaded machine could take longer than the test leaves between
// two waiters.
func warmPool(t *testing.T) *pgxpool.Pool {
	p := pgtest.Pool(t)
	if err := p.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	return p
}

// fairLog is the grants and releases fair waiters saw, in the order they
// saw them.
type fairLog struct {
	mu     sync.Mutex
	events []string
}

func (f *fairLog) add(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, fmt.Sprintf(format, args...))
}

func (f *fairLog) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fmt.Sprint(f.events)
}

// A semaphore of 2 permits, both held; five fair waiters, each its own
// client, start 200 ms apart; one permit is released and the other kept:
// the waiters are granted the freed permit one after another in the order
// they started waiting, with and without wake-on-release.
func TestFairSemaphoreOrder(t *testing.T) {
	for _, wake := range []bool{false, true} {
		t.Run(fmt.Sprintf("wake=%v", wake), func(t *testing.T) {
			ctx := context.Background()
			opts := []pglease.Option{pglease.WithFairWaiting(), pglease.WithBackoff(5*time.Millisecond, 100*time.Millisecond)}
			if wake {
				opts = append(opts, pglease.WithWakeOnRelease())
			}
			key := uniqueKey(t)
			holder := semaphore(t, newClient(t, pgtest.Pool(t), opts...), key, 2)
			first, err := holder.TryAcquire(ctx, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			kept, err := holder.TryAcquire(ctx, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer kept.Release(ctx)
			var log fairLog
			var wg sync.WaitGroup
			for i := range 5 {
				sem := semaphore(t, newClient(t, warmPool(t), opts...), key, 2)
				wg.Go(func() {
					err := sem.Do(ctx, 10*time.Second, func(ctx context.Context, l *pglease.Lease) error {
						log.add("%d", i+1)
						time.Sleep(20 * time.Millisecond)
						return nil
					})
					if err != nil {
						t.Error(err)
					}
				})
				time.Sleep(200 * time.Millisecond)
			}
			// Every waiter has queued (the last one's first attempt may
			// come late on a loaded machine) before the permit is freed.
			queued := 0
			for deadline := time.Now().Add(5 * time.Second); queued != 5 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				queued = rows(t, pgtest.Pool(t), `SELECT FROM pgfence_waiters WHERE lock_key = $1 AND expires_at > now()`, key)
			}
			if queued != 5 {
				t.Fatalf("%d waiters queued, want 5", queued)
			}
			if err := first.Release(ctx); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			if got := log.String(); got != "[1 2 3 4 5]" {
				t.Fatalf("granted in the order %v, want [1 2 3 4 5]", got)
			}
		})
	}
}

// On a shared/exclusive key whose exclusive lease is held, fair waiters
// queue as shared 1, shared 2, exclusive 3, shared 4: once it is released,
// 1 and 2 hold shared leases together, 3 is granted only after both ended
// (and 4, though shared, does not join them: it is behind 3), and 4 after 3.
func TestFairSharedExclusiveOrder(t *testing.T) {
	ctx := context.Background()
	opts := []pglease.Option{pglease.WithFairWaiting(), pglease.WithWakeOnRelease(), pglease.WithBackoff(5*time.Millisecond, 100*time.Millisecond)}
	key := uniqueKey(t)
	h, err := newClient(t, pgtest.Pool(t), opts...).TryAcquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var log fairLog
	var wg sync.WaitGroup
	for i, exclusive := range []bool{false, false, true, false} {
		c := newClient(t, warmPool(t), opts...)
		wg.Go(func() {
			kind := pglease.Shared()
			if exclusive {
				kind = pglease.Exclusive()
			}
			l, err := c.Acquire(ctx, key, 10*time.Second, kind)
			if err != nil {
				t.Error(err)
				return
			}
			log.add("+%d", i+1)
			time.Sleep(300 * time.Millisecond)
			log.add("-%d", i+1)
			if err := l.Release(ctx); err != nil {
				t.Error(err)
			}
		})
		time.Sleep(200 * time.Millisecond)
	}
	// A shared acquirer that does not queue is kept out too: the exclusive
	// waiter is ahead of it.
	if _, err := newClient(t, pgtest.Pool(t)).TryAcquire(ctx, key, time.Second, pglease.Shared()); !errors.Is(err, pgfence.ErrNotAcquired) {
		t.Fatalf("TryAcquire(Shared) while an exclusive lease is held and waited for: %v", err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	got := log.String()
	for _, want := range []string{"[+1 +2 -1 -2 +3 -3 +4 -4]", "[+1 +2 -2 -1 +3 -3 +4 -4]", "[+2 +1 -1 -2 +3 -3 +4 -4]", "[+2 +1 -2 -1 +3 -3 +4 -4]"} {
		if got == want {
			return
		}
	}
	t.Fatalf("grants and releases %v, want 1 and 2 together, then 3 alone, then 4", got)
}

// A fair waiter that listens is woken by a release from any client, one
// that neither waits fairly nor notifies, for every kind of key: it is
// granted within 150 ms of the release although its backoff is 5 to 10 s.
func TestFairWakeFromAnyReleaser(t *testing.T) {
	ctx := context.Background()
	plain := newClient(t, pgtest.Pool(t))
	waiter := newClient(t, pgtest.Pool(t), pglease.WithFairWaiting(), pglease.WithWakeOnRelease(), pglease.WithBackoff(5*time.Second, 10*time.Second))
	key := uniqueKey(t)
	sem := semaphore(t, plain, key+"-sem", 1)
	semW := semaphore(t, waiter, key+"-sem", 1)
	for _, kind := range []struct {
		name       string
		hold, wait func() (*pglease.Lease, error)
	}{
		{"mutex", func() (*pglease.Lease, error) { return plain.TryAcquire(ctx, key, 10*time.Second) },
			func() (*pglease.Lease, error) { return waiter.Acquire(ctx, key, 10*time.Second) }},
		{"semaphore", func() (*pglease.Lease, error) { return sem.TryAcquire(ctx, 10*time.Second) },
			func() (*pglease.Lease, error) { return semW.Acquire(ctx, 10*time.Second) }},
		{"exclusive", func() (*pglease.Lease, error) {
			return plain.TryAcquire(ctx, key+"-rw", 10*time.Second, pglease.Shared())
		},
			func() (*pglease.Lease, error) { return waiter.Acquire(ctx, key+"-rw", 10*time.Second) }},
	} {
		t.Run(kind.name, func(t *testing.T) {
			h, err := kind.hold()
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan time.Time, 1)
			go func() {
				l, err := kind.wait()
				got <- time.Now()
				if err != nil {
					t.Error(err)
					return
				}
				l.Release(ctx)
			}()
			time.Sleep(300 * time.Millisecond) // the waiter's first attempt failed; it sleeps its backoff
			released := time.Now()
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if d := (<-got).Sub(released); d > 150*time.Millisecond {
				t.Fatalf("granted %v after the release: not woken", d)
			}
		})
	}
}

// A fair waiter that disagrees with the key's holders about its kind or
// number of permits gets ErrPermitsMismatch at once, an exclusive one waits
// for every permit, and neither leaves a place in the queue.
func TestFairWaiterPermitsMismatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pool := pgtest.Pool(t)
	c := newClient(t, pool, pglease.WithFairWaiting())
	key := uniqueKey(t)
	l, err := semaphore(t, c, key, 2).TryAcquire(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if _, err := semaphore(t, c, key, 3).Acquire(ctx, time.Second); !errors.Is(err, pglease.ErrPermitsMismatch) {
		t.Fatalf("a fair waiter for 3 permits of a key held as 2: %v", err)
	}
	if _, err := c.Acquire(ctx, key, time.Second, pglease.Shared()); !errors.Is(err, pglease.ErrPermitsMismatch) {
		t.Fatalf("a fair shared waiter on a semaphore key: %v", err)
	}
	// An exclusive waiter is not refused: it waits for every permit.
	wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer wcancel()
	if _, err := c.Acquire(wctx, key, time.Second); !errors.Is(err, pgfence.ErrNotAcquired) {
		t.Fatalf("a fair exclusive waiter on a key held as permits: %v, want pgfence.ErrNotAcquired after waiting", err)
	}
	if n := rows(t, pool, `SELECT FROM pgfence_waiters WHERE lock_key = $1`, key); n != 0 {
		t.Fatalf("%d places left in the queue by refused waiters", n)
	}
}

// A fair waiter for a permit that gives up leaves the queue at once: the
// waiter behind it is granted the freed permit as soon as it is released;
// TryAcquire takes no place.
func TestFairSemaphoreWaiterGivesUp(t *testing.T) {
	ctx := context.Background()
	opts := []pglease.Option{pglease.WithFairWaiting(), pglease.WithWakeOnRelease(), pglease.WithBackoff(5*time.Millisecond, 50*time.Millisecond)}
	key := uniqueKey(t)
	pool := pgtest.Pool(t)
	sem := semaphore(t, newClient(t, pool, opts...), key, 1)
	h, err := sem.TryAcquire(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	quitter, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := semaphore(t, newClient(t, warmPool(t), opts...), key, 1).Acquire(quitter, 10*time.Second); !errors.Is(err, pgfence.ErrNotAcquired) {
		t.Fatalf("the waiter that gives up: %v", err)
	}
	if _, err := sem.TryAcquire(ctx, time.Second); !errors.Is(err, pgfence.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held semaphore: %v", err)
	}
	if n := rows(t, pool, `SELECT FROM pgfence_waiters WHERE lock_key = $1`, key); n != 0 {
		t.Fatalf("%d places left after the waiter gave up and a TryAcquire", n)
	}
	got := make(chan time.Time, 1)
	go func() {
		l, err := semaphore(t, newClient(t, warmPool(t), opts...), key, 1).Acquire(ctx, 10*time.Second)
		got <- time.Now()
		if err != nil {
			t.Error(err)
			return
		}
		l.Release(ctx)
	}()
	time.Sleep(200 * time.Millisecond)
	released := time.Now()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-got:
		if d := at.Sub(released); d > time.Second {
			t.Fatalf("the waiter was granted %v after the release", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not granted the permit")
	}
}

// A release calls the fair wake-up only for a key whose lease row says a
// fair waiter was refused: a release with nobody queued runs no PL/pgSQL,
// and one with a queued waiter does (counted by track_functions within the
// releasing transaction, which is rolled back).
func TestReleaseWakesOnlyQueuedKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	plain := newClient(t, pool)
	key := uniqueKey(t)
	l, err := plain.TryAcquire(ctx, key, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	wakeCalls := func() int64 {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		var calls int64
		err = tx.QueryRow(ctx, `SELECT set_config('track_functions', 'pl', true)`).Scan(new(string))
		if err == nil {
			_, err = tx.Exec(ctx, `UPDATE lock_leases SET expires_at = now() WHERE lock_key = $1`, key)
		}
		if err == nil { // the wake-up trigger is deferred to the commit
			_, err = tx.Exec(ctx, `SET CONSTRAINTS ALL IMMEDIATE`)
		}
		if err == nil {
			err = tx.QueryRow(ctx, `SELECT coalesce(pg_stat_get_xact_function_calls('pgfence_wake_waiters(text)'::regprocedure), 0)`).Scan(&calls)
		}
		if err != nil {
			t.Fatal(err)
		}
		return calls
	}
	if n := wakeCalls(); n != 0 {
		t.Fatalf("a release with no waiter called the wake-up %d times, want 0", n)
	}
	var ahead int
	if err := pool.QueryRow(ctx, `SELECT ahead FROM pgfence_acquire_kind($1, 'exclusive', 0, 'waiter', $2, 10000000, 10000000, true)`,
		key, key+"-waiter").Scan(&ahead); err != nil || ahead != 0 {
		t.Fatalf("fair attempt on a held key: ahead %d, %v; want 0 (refused)", ahead, err)
	}
	if n := wakeCalls(); n != 1 {
		t.Fatalf("a release with a queued waiter called the wake-up %d times, want 1", n)
	}
}

// A fair waiter's wake-up goes on its own client's channel: a connection
// that LISTENs on the shared channel hears nothing of it, while the waiter
// is granted within 150 ms of the release although its backoff is 5 to 10 s.
func TestFairWakeOnClientChannel(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	plain := newClient(t, pool)
	waiter := newClient(t, pgtest.Pool(t), pglease.WithFairWaiting(), pglease.WithWakeOnRelease(), pglease.WithBackoff(5*time.Second, 10*time.Second))
	key := uniqueKey(t)
	other, err := pgx.Connect(ctx, pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	if _, err := other.Exec(ctx, `LISTEN pgfence_lease_released`); err != nil {
		t.Fatal(err)
	}
	if d := wakeRound(t, plain, waiter, key, 300*time.Millisecond); d > 150*time.Millisecond {
		t.Fatalf("granted %v after the release: not woken", d)
	}
	// The waiter's own Release notifies its key there (WithWakeOnRelease
	// wakes waiters that are not fair); a fair waiter's token must not come.
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	for {
		n, err := other.WaitForNotification(wctx)
		if err != nil {
			break
		}
		if n.Payload != key {
			t.Fatalf("the shared channel heard %q: the wake-up went to every client", n.Payload)
		}
	}
}
