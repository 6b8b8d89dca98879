package pglease_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/fencesql"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

const wakeChannel = "pgfence_lease_released"

// Release and ReleaseByOwnerToken each send one notification, with the key,
// when they release a row; a Release that matches nothing sends none.
func TestReleaseNotifies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	listener, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Release()
	if _, err := listener.Exec(ctx, "LISTEN "+wakeChannel); err != nil {
		t.Fatal(err)
	}
	defer listener.Exec(ctx, "UNLISTEN *")
	key := uniqueKey(t)
	// next waits for a notification about key (other tests' clients may
	// release keys of their own).
	next := func(wait time.Duration) (string, bool) {
		wctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		for {
			n, err := listener.Conn().WaitForNotification(wctx)
			if err != nil {
				return "", false
			}
			if n.Payload == key {
				return n.Payload, true
			}
		}
	}

	pgtest.Step(t, "a client without the option releases silently", func(t *testing.T) {
		// Notifying is opt-in, since notifying transactions commit one at a time.
		quiet := newClient(t, pool)
		ql, err := quiet.TryAcquire(ctx, key, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := ql.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if p, ok := next(100 * time.Millisecond); ok {
			t.Fatalf("a release without WithWakeOnRelease notified %q", p)
		}
	})

	pgtest.Step(t, "with the option, acquire is silent and release notifies once", func(t *testing.T) {
		c := newClient(t, pool, pglease.WithWakeOnRelease())
		l, err := c.TryAcquire(ctx, key, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if p, ok := next(100 * time.Millisecond); ok {
			t.Fatalf("acquire notified %q", p)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if p, ok := next(2 * time.Second); !ok || p != key {
			t.Fatalf("after Release: notification %q, %v; want %q", p, ok, key)
		}
		if p, ok := next(100 * time.Millisecond); ok {
			t.Fatalf("second notification %q after one Release", p)
		}
	})

	q := fencesql.New(pool)
	pgtest.Step(t, "a stale fence matches no row and notifies nothing", func(t *testing.T) {
		if _, err := q.ReleaseNotify(ctx, fencesql.ReleaseNotifyParams{LockKey: key, Fence: -1}); err == nil {
			t.Fatal("Release with a stale fence found a row")
		}
		if p, ok := next(100 * time.Millisecond); ok {
			t.Fatalf("a Release that released nothing notified %q", p)
		}
	})

	pgtest.Step(t, "Abandon on the ambiguous-acquire path notifies", func(t *testing.T) {
		// A token of its own: Abandon tombstones it for good, and the test
		// may run again on the same database.
		token := "tok-" + key
		if _, err := fencedb.New(pool).Acquire(ctx, fencedb.AcquireParams{LockKey: key, Owner: "t", OwnerToken: token, TtlMicros: 5e6}); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Abandon(ctx, fencesql.AbandonParams{LockKey: key, OwnerToken: token, Notify: true}); err != nil {
			t.Fatal(err)
		}
		if p, ok := next(2 * time.Second); !ok || p != key {
			t.Fatalf("after Abandon: notification %q, %v; want %q", p, ok, key)
		}
	})
}

// wakeRound holds key with holder, lets waiter wait in Acquire for hold,
// releases, and returns how long after the release began the waiter had the
// lease.
func wakeRound(t testing.TB, holder, waiter *pglease.Client, key string, hold time.Duration) time.Duration {
	t.Helper()
	ctx := context.Background()
	hl, err := holder.TryAcquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		at  time.Time
		l   *pglease.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		actx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		l, err := waiter.Acquire(actx, key, 10*time.Second)
		got <- result{time.Now(), l, err}
	}()
	time.Sleep(hold) // the point: the waiter waits in Acquire this long
	released := time.Now()
	if err := hl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.at.Before(released) {
		t.Fatal("the waiter had the lease before it was released")
	}
	if err := r.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	return r.at.Sub(released)
}

// wakeWaitUntil polls cond until it holds or d passes.
func wakeWaitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// With WithWakeOnRelease, a waiter whose backoff sleeps are 2s takes the
// lease within a fraction of that after the release, round after round. By
// polling alone each round would take under 500ms with probability 1/4.
func TestWakeOnRelease(t *testing.T) {
	pool := pgtest.Pool(t)
	holder := newClient(t, pool, pglease.WithWakeOnRelease())
	waiter := newClient(t, pool, pglease.WithWakeOnRelease(), pglease.WithBackoff(2*time.Second, 2*time.Second))
	key := uniqueKey(t)
	if pglease.ListenerPID(waiter) != 0 {
		t.Fatal("the listener started before any wait")
	}
	var lats []time.Duration
	for range 5 {
		// 300ms: the first attempt failed and the listener is up, so the
		// waiter is in a 2s sleep when the release comes.
		lats = append(lats, wakeRound(t, holder, waiter, key, 300*time.Millisecond))
	}
	t.Logf("release-to-acquire latencies with WithWakeOnRelease (backoff 2s): %v", lats)
	for _, d := range lats {
		if d > 500*time.Millisecond {
			t.Fatalf("a waiter took %v after the release (all rounds: %v); the notification did not wake it", d, lats)
		}
	}
	if pglease.Listens(waiter) != 1 {
		t.Fatalf("listener LISTENed %d times, want once", pglease.Listens(waiter))
	}
	if pglease.Wakeups(waiter) < 5 {
		t.Fatalf("%d wake-ups for 5 releases", pglease.Wakeups(waiter))
	}
}

// The listener's periodic liveness check (a timed-out wait, then LISTEN again)
// keeps its connection: with a check every 20ms, it stays on one LISTEN and
// still wakes waiters.
func TestWakeListenerPings(t *testing.T) {
	pool := pgtest.Pool(t)
	holder := newClient(t, pool, pglease.WithWakeOnRelease())
	waiter := newClient(t, pool, pglease.WithWakeOnRelease(), pglease.WithBackoff(2*time.Second, 2*time.Second))
	pglease.SetListenerPing(waiter, 20*time.Millisecond)
	key := uniqueKey(t)
	for range 3 {
		if d := wakeRound(t, holder, waiter, key, 300*time.Millisecond); d > 500*time.Millisecond {
			t.Fatalf("a waiter took %v after the release", d)
		}
	}
	if n := pglease.Listens(waiter); n != 1 {
		t.Fatalf("LISTENed %d times, want once: the pings broke the connection", n)
	}
	// The checks kept the listener's one backend, which is still there.
	terminateListener(t, pool, waiter)
}

// Without the option there is no listener, and the waiter still gets the
// lease by polling.
func TestWithoutWakePolls(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	holder := newClient(t, pool)
	waiter := newClient(t, pool, pglease.WithBackoff(50*time.Millisecond, 200*time.Millisecond))
	key := uniqueKey(t)
	if d := wakeRound(t, holder, waiter, key, 300*time.Millisecond); d > 3*time.Second {
		t.Fatalf("polling took %v", d)
	}
	if pglease.ListenerPID(waiter) != 0 {
		t.Fatal("a listener without WithWakeOnRelease")
	}
}

// terminateListener kills the listening backend, found in pg_stat_activity
// by its pid and its last query: its LISTEN (the channel is quoted:
// internal/listen quotes every channel name), or the ping it sends instead
// once no channel is subscribed. It returns the pid.
func terminateListener(t *testing.T, pool *pgxpool.Pool, c *pglease.Client) uint32 {
	t.Helper()
	pid := pglease.ListenerPID(c)
	if pid == 0 {
		t.Fatal("no listener to kill")
	}
	var killed bool
	err := pool.QueryRow(context.Background(),
		`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		  WHERE pid = $1 AND (starts_with(query, 'LISTEN ') OR query = '-- ping') AND datname = current_database()`,
		int32(pid)).Scan(&killed)
	if err != nil || !killed {
		t.Fatalf("terminating the listener's backend %d: %v, %v", pid, killed, err)
	}
	return pid
}

// Killing the listener's backend does not break a waiting Acquire: it gets
// the lease by polling while the listener is down, and the listener comes
// back, with a new backend, and wakes waiters again.
func TestWakeListenerKilled(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	holder := newClient(t, pool, pglease.WithWakeOnRelease())
	waiter := newClient(t, pool, pglease.WithWakeOnRelease(), pglease.WithBackoff(2*time.Second, 2*time.Second))
	// Reconnect in 2-4s, so that the release below finds no listener.
	pglease.SetListenerRetry(waiter, 4*time.Second, 4*time.Second)
	key := uniqueKey(t)

	hl, err := holder.TryAcquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		actx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		l, err := waiter.Acquire(actx, key, 10*time.Second)
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	wakeWaitUntil(t, 5*time.Second, "the listener did not start", func() bool { return pglease.ListenerPID(waiter) != 0 })
	old := terminateListener(t, pool, waiter)
	wakeWaitUntil(t, 2*time.Second, "the listener did not notice its backend's end", func() bool { return pglease.ListenerPID(waiter) == 0 })
	released := time.Now()
	if err := hl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("Acquire with the listener down: %v", err)
		}
		t.Logf("with the listener down, the waiter polled its way to the lease in %v", time.Since(released))
	case <-time.After(5 * time.Second):
		t.Fatal("with the listener down, the waiter did not get the lease by polling")
	}

	wakeWaitUntil(t, 6*time.Second, "the listener did not reconnect", func() bool {
		pid := pglease.ListenerPID(waiter)
		return pid != 0 && pid != old
	})
	if n := pglease.Listens(waiter); n != 2 {
		t.Fatalf("LISTENed %d times, want 2", n)
	}
	if d := wakeRound(t, holder, waiter, key, 300*time.Millisecond); d > 500*time.Millisecond {
		t.Fatalf("after the reconnection, a waiter took %v after the release", d)
	}
}

// Close ends the listener and its connection, also while it waits to
// reconnect.
func TestWakeClose(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	holder := newClient(t, pool)
	key := uniqueKey(t)
	if _, err := holder.TryAcquire(ctx, key, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	backendGone := func(pid uint32) bool {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, int32(pid)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	}
	for _, reconnecting := range []bool{false, true} {
		waiter, err := pglease.New(pool, pglease.WithWakeOnRelease(), pglease.WithMaxWait(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		pglease.SetListenerRetry(waiter, time.Minute, time.Minute)
		if _, err := waiter.Acquire(ctx, key, time.Second); !errors.Is(err, pgfence.ErrNotAcquired) {
			t.Fatalf("Acquire of a held key: %v", err)
		}
		wakeWaitUntil(t, 5*time.Second, "the listener did not start", func() bool { return pglease.ListenerPID(waiter) != 0 })
		pid := pglease.ListenerPID(waiter)
		if reconnecting {
			terminateListener(t, pool, waiter)
			wakeWaitUntil(t, 2*time.Second, "the listener did not notice its backend's end", func() bool { return pglease.ListenerPID(waiter) == 0 })
		}
		start := time.Now()
		if err := waiter.Close(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("Close took %v", d)
		}
		if pglease.ListenerPID(waiter) != 0 {
			t.Fatal("still listening after Close")
		}
		wakeWaitUntil(t, 2*time.Second, "the listener's backend outlived Close", func() bool { return backendGone(pid) })
	}
	// pgtest.Main fails the package if the listener's goroutine outlived Close.
}

// BenchmarkWakeLatency measures how long after a release a waiter that has
// waited 300ms gets the lease, with the default backoff (20ms to 1s), by
// polling and with WithWakeOnRelease. ns/op is the length of a round; the
// figure is ms/wake (and p90-ms/wake).
//
//	go test -run '^$' -bench WakeLatency -benchtime 20x ./pglease/
func BenchmarkWakeLatency(b *testing.B) {
	pool := pgtest.Pool(b)
	for _, impl := range []struct {
		name string
		opts []pglease.Option
	}{{"poll", nil}, {"notify", []pglease.Option{pglease.WithWakeOnRelease()}}} {
		b.Run("impl="+impl.name, func(b *testing.B) {
			holder, err := pglease.New(pool, impl.opts...) // the holder notifies only with the option
			if err != nil {
				b.Fatal(err)
			}
			defer holder.Close()
			waiter, err := pglease.New(pool, impl.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer waiter.Close()
			key := "bench/wake/" + impl.name
			var lats []time.Duration
			for b.Loop() {
				lats = append(lats, wakeRound(b, holder, waiter, key, 300*time.Millisecond))
			}
			slices.Sort(lats)
			var sum time.Duration
			for _, d := range lats {
				sum += d
			}
			b.ReportMetric(float64(sum.Microseconds())/float64(len(lats))/1000, "ms/wake")
			b.ReportMetric(float64(lats[len(lats)*9/10].Microseconds())/1000, "p90-ms/wake")
		})
	}
}

// Waiters that do not queue are woken too for a semaphore and a
// shared/exclusive key, by a release from a client with WithWakeOnRelease:
// each is granted within 150 ms of the release although its backoff is 5 to
// 10 s.
func TestWakeOnReleasePermits(t *testing.T) {
	ctx := context.Background()
	holder := newClient(t, pgtest.Pool(t), pglease.WithWakeOnRelease())
	waiter := newClient(t, pgtest.Pool(t), pglease.WithWakeOnRelease(), pglease.WithBackoff(5*time.Second, 10*time.Second))
	key := uniqueKey(t)
	semH, semW := semaphore(t, holder, key+"-sem", 1), semaphore(t, waiter, key+"-sem", 1)
	for _, kind := range []struct {
		name       string
		hold, wait func() (*pglease.Lease, error)
	}{
		{"semaphore", func() (*pglease.Lease, error) { return semH.TryAcquire(ctx, 10*time.Second) },
			func() (*pglease.Lease, error) { return semW.Acquire(ctx, 10*time.Second) }},
		{"exclusive", func() (*pglease.Lease, error) {
			return holder.TryAcquire(ctx, key+"-rw", 10*time.Second, pglease.Shared())
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
