package pglease_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/testsupport/dbenv"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/migrations"
	"github.com/pgfence/pgfence/pglease"
)

// Fences drawn outside an acquisition, by sessions whose synchronous_commit
// is off, must not repeat after a crash: fencedb.NextFence and a raw SELECT
// pgfence_next_fence() commit durably whatever the session says. The WAL
// writer is slowed to 10s so that nothing flushes the WAL behind the test's
// back. The draws include the hard case: the draw that WAL-logged the
// sequence's next batch of values rolled back, and the later draws hand out
// values from that batch without writing anything themselves.
func TestFencesDrawnAsynchronouslySurviveCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash-restarts a cluster of its own (about 5s); run without -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := dbenv.NewCluster(5436)
	if err != nil {
		t.Skipf("needs local PostgreSQL server binaries (initdb, postgres): %v", err)
	}
	t.Cleanup(func() { cl.Remove() })
	if err := cl.InitDB(ctx); err != nil {
		t.Fatal(err)
	}
	settings := []string{"wal_writer_delay=10000ms", "autovacuum=off"}
	if err := cl.Start(ctx, nil, settings...); err != nil {
		t.Fatal(err)
	}
	admin, err := pgxpool.New(ctx, cl.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	if err := migrations.Up(ctx, admin); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(cl.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var maxBefore int64
	raw := func() (int64, error) {
		var f int64
		err := pool.QueryRow(ctx, "SELECT pgfence_next_fence()").Scan(&f)
		return f, err
	}
	q := fencedb.New(pool)
	pgtest.Step(t, "draw fences with synchronous_commit off", func(t *testing.T) {
		note := func(f int64, err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
			maxBefore = max(maxBefore, f)
		}
		for range 20 {
			note(q.NextFence(ctx))
			note(raw())
		}
		// The draw right after a checkpoint WAL-logs the sequence; roll it back.
		if _, err := admin.Exec(ctx, "CHECKPOINT"); err != nil {
			t.Fatal(err)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SELECT pgfence_next_fence()"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		for range 5 {
			note(raw())
			note(q.NextFence(ctx))
		}
	})
	pool.Close()
	admin.Close()

	var after *pgxpool.Pool
	pgtest.Step(t, "crash-restart", func(t *testing.T) {
		cl.Kill(syscall.SIGKILL)
		if err := cl.Start(ctx, nil, settings...); err != nil {
			t.Fatal(err)
		}
		var err error
		after, err = pgxpool.New(ctx, cl.URL("postgres"))
		if err != nil {
			t.Fatal(err)
		}
	})
	defer after.Close()
	var next int64
	t.Run("NextFence after the crash is above every fence before", func(t *testing.T) {
		var err error
		next, err = fencedb.New(after).NextFence(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if next <= maxBefore {
			t.Fatalf("after the crash NextFence returned %d, not above %d returned before it", next, maxBefore)
		}
	})
	t.Run("a lease after the crash is fenced above every fence before", func(t *testing.T) {
		c, err := pglease.New(after, pglease.WithoutAutoRenew())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		l, err := c.TryAcquire(ctx, "after-crash", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= maxBefore {
			t.Fatalf("after the crash a lease got fence %d, not above %d returned before it", l.Fence(), maxBefore)
		}
		l.Release(ctx)
	})
	t.Logf("highest fence before the crash %d, first after %d", maxBefore, next)
}
