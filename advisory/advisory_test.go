package advisory_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/advisory"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

func key(t *testing.T, s string) advisory.Key {
	t.Helper()
	k, err := advisory.StringKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func noop(context.Context, pgx.Tx) error { return nil }

// tryFrom reports whether a fresh transaction could take key now.
func tryFrom(t *testing.T, pool *pgxpool.Pool, k advisory.Key) bool {
	t.Helper()
	err := advisory.TryDo(context.Background(), pool, k, noop)
	if err != nil && !errors.Is(err, pgfence.ErrNotAcquired) {
		t.Fatal(err)
	}
	return err == nil
}

// hold takes k in a goroutine and keeps it until release is closed. It
// returns the holder's backend pid and a channel with Do's result.
func hold(t *testing.T, pool *pgxpool.Pool, k advisory.Key, release <-chan struct{}) (pid int32, result <-chan error) {
	t.Helper()
	pids := make(chan int32, 1)
	res := make(chan error, 1)
	go func() {
		res <- advisory.Do(context.Background(), pool, k, func(ctx context.Context, tx pgx.Tx) error {
			var pid int32
			if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				return err
			}
			pids <- pid
			<-release
			_, err := tx.Exec(ctx, `SELECT 1`)
			return err
		})
	}()
	select {
	case pid = <-pids:
	case err := <-res:
		t.Fatalf("holder ended early: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("holder did not get the lock")
	}
	return pid, res
}

func TestStringKeyMatchesSQL(t *testing.T) {
	pool := pgtest.Pool(t)
	for _, s := range []string{"invoice:72", "a", "ünïcödé ключ 🔒", strings.Repeat("x", 512)} {
		k := key(t, s)
		want, _ := advisory.KeyID(k)
		var got int64
		if err := pool.QueryRow(context.Background(), `SELECT `+advisory.KeySQL, s).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("%q: Go %d, SQL %d", s, want, got)
		}
	}
	if a, b := key(t, "invoice:72"), key(t, "invoice:73"); a == b {
		t.Fatal("different strings, same key")
	}
}

func TestMutualExclusionAcrossConnections(t *testing.T) {
	pool := pgtest.Pool(t, func(c *pgxpool.Config) { c.MaxConns = 20 })
	ctx := context.Background()
	pool.Exec(ctx, `DROP TABLE IF EXISTS counter; CREATE TABLE counter (n int NOT NULL); INSERT INTO counter VALUES (0)`)
	k := key(t, "counter")
	var inside, maxInside atomic.Int32
	var wg sync.WaitGroup
	const goroutines, rounds = 8, 25
	for range goroutines {
		wg.Go(func() {
			for range rounds {
				err := advisory.Do(ctx, pool, k, func(ctx context.Context, tx pgx.Tx) error {
					now := inside.Add(1)
					defer inside.Add(-1)
					if now > maxInside.Load() {
						maxInside.Store(now)
					}
					// A read-modify-write that loses updates without the lock.
					var n int
					if err := tx.QueryRow(ctx, `SELECT n FROM counter`).Scan(&n); err != nil {
						return err
					}
					// The sleep widens the read-modify-write window, so
					// that without the lock updates would be lost.
					time.Sleep(time.Millisecond)
					_, err := tx.Exec(ctx, `UPDATE counter SET n = $1`, n+1)
					return err
				})
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	var n int
	pool.QueryRow(ctx, `SELECT n FROM counter`).Scan(&n)
	if n != goroutines*rounds || maxInside.Load() != 1 {
		t.Fatalf("counter %d, want %d; at most %d inside at once, want 1", n, goroutines*rounds, maxInside.Load())
	}
}

func TestReleasedAtCommitAndRollback(t *testing.T) {
	pool := pgtest.Pool(t)
	ctx := context.Background()
	pool.Exec(ctx, `DROP TABLE IF EXISTS effects; CREATE TABLE effects (what text)`)
	k := key(t, "commit-rollback")

	pgtest.Step(t, "refused while held, released at commit", func(t *testing.T) {
		// While held, another transaction is refused, and the function does not run.
		release := make(chan struct{})
		_, res := hold(t, pool, k, release)
		ran := false
		err := advisory.TryDo(ctx, pool, k, func(context.Context, pgx.Tx) error { ran = true; return nil })
		if !errors.Is(err, pgfence.ErrNotAcquired) || ran {
			t.Fatalf("TryDo while held: %v, ran %v", err, ran)
		}
		close(release)
		if err := <-res; err != nil {
			t.Fatal(err)
		}
		if !tryFrom(t, pool, k) {
			t.Fatal("not released at commit")
		}
	})

	pgtest.Step(t, "fn's error rolls back and releases", func(t *testing.T) {
		// Rollback: fn's error rolls its writes back and releases the lock.
		boom := errors.New("boom")
		err := advisory.TryDo(ctx, pool, k, func(ctx context.Context, tx pgx.Tx) error {
			tx.Exec(ctx, `INSERT INTO effects VALUES ('rolled back')`)
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("got %v, want fn's error", err)
		}
		var n int
		pool.QueryRow(ctx, `SELECT count(*) FROM effects`).Scan(&n)
		if n != 0 || !tryFrom(t, pool, k) {
			t.Fatalf("after rollback: %d effects, or lock still held", n)
		}
	})

	pgtest.Step(t, "a panic in fn rolls back and releases", func(t *testing.T) {
		// A panic in fn rolls back too.
		func() {
			defer func() { recover() }()
			advisory.Do(ctx, pool, k, func(context.Context, pgx.Tx) error { panic("fn panicked") })
		}()
		if !tryFrom(t, pool, k) {
			t.Fatal("not released after a panic")
		}
	})

	pgtest.Step(t, "key spaces and keys do not interfere", func(t *testing.T) {
		// The two key spaces and different keys do not interfere.
		release := make(chan struct{})
		_, res := hold(t, pool, advisory.PairKey(1, 2), release)
		if id, _ := advisory.KeyID(k); !tryFrom(t, pool, advisory.Int64Key(id)) || !tryFrom(t, pool, advisory.PairKey(2, 1)) || tryFrom(t, pool, advisory.PairKey(1, 2)) {
			t.Fatal("key spaces interfere")
		}
		close(release)
		<-res
	})
}

func TestReleasedWhenConnectionDrops(t *testing.T) {
	pool := pgtest.Pool(t)
	ctx := context.Background()
	k := key(t, "connection-drop")
	release := make(chan struct{})
	pid, res := hold(t, pool, k, release)
	if tryFrom(t, pool, k) {
		t.Fatal("not held")
	}
	var ok bool
	if err := pool.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminate: %v %v", ok, err)
	}
	eventually(t, 5*time.Second, "lock still held after the holder's connection dropped",
		func() bool { return tryFrom(t, pool, k) })
	close(release)
	if err := <-res; err == nil {
		t.Fatal("the holder whose connection dropped reported success")
	}
}

// ignoreCancel is a context-watcher handler that does nothing when a
// context ends, so that only Do's own cancel request can end a wait.
type ignoreCancel struct{}

func (ignoreCancel) HandleCancel(context.Context) {}
func (ignoreCancel) HandleUnwatchAfterCancel()    {}

func TestDoWaitsAndContextInterruptsTheWait(t *testing.T) {
	t.Run("pgx default", func(t *testing.T) { testWait(t, pgtest.Pool(t)) })
	t.Run("context ignored by pgx", func(t *testing.T) {
		testWait(t, pgtest.Pool(t, func(c *pgxpool.Config) {
			c.ConnConfig.BuildContextWatcherHandler = func(*pgconn.PgConn) ctxwatch.Handler { return ignoreCancel{} }
		}))
	})
}

func testWait(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	k := key(t, "wait")
	release := make(chan struct{})
	_, res := hold(t, pool, k, release)

	// A waiter whose context ends: it returns promptly, and the server has
	// stopped waiting too (no ungranted advisory lock is left queued).
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	ran := false
	err := advisory.Do(wctx, pool, k, func(context.Context, pgx.Tx) error { ran = true; return nil })
	if !errors.Is(err, context.DeadlineExceeded) || ran {
		t.Fatalf("Do with an ending context: %v, ran %v", err, ran)
	}
	if took := time.Since(t0); took > 2*time.Second {
		t.Fatalf("Do returned %v after its context ended", took)
	}
	eventually(t, 2*time.Second, "server backends still wait for the lock after the caller gave up",
		func() bool { return waiters(t, pool) == 0 })

	// A waiter that gets the lock once the holder commits. It is seen
	// queued in pg_locks before the holder lets go, so the wait is real.
	got := make(chan error, 1)
	go func() { got <- advisory.Do(ctx, pool, k, noop) }()
	eventually(t, 10*time.Second, "the second waiter never queued for the lock", func() bool {
		return waiters(t, pool) == 1
	})
	select {
	case err := <-got:
		t.Fatalf("Do returned while the key was held: %v", err)
	default:
	}
	close(release)
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// waiters counts the server backends queued for an advisory lock.
func waiters(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestBadInput(t *testing.T) {
	pool := pgtest.Pool(t)
	ctx := context.Background()
	for _, s := range []string{"", "a\x00b", "\xff", strings.Repeat("k", 513)} {
		if _, err := advisory.StringKey(s); !errors.Is(err, pgfence.ErrInvalidInput) {
			t.Errorf("StringKey(%q): %v", s, err)
		}
	}
	if err := advisory.TryDo(ctx, pool, advisory.Key{}, noop); !errors.Is(err, pgfence.ErrInvalidInput) {
		t.Errorf("zero key: %v", err)
	}
	if err := advisory.Do(ctx, nil, advisory.Int64Key(1), noop); !errors.Is(err, pgfence.ErrInvalidInput) {
		t.Errorf("nil pool: %v", err)
	}
	if err := advisory.Do(ctx, pool, advisory.Int64Key(1), nil); !errors.Is(err, pgfence.ErrInvalidInput) {
		t.Errorf("nil fn: %v", err)
	}
}
