package pglease_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/internal/testsupport/dbenv"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/migrations"
	"github.com/pgfence/pgfence/pglease"
)

// Fences must never go backwards across a crash-restart of the server and
// across the promotion of an asynchronous standby that missed the newest
// grants. This test builds both situations with real clusters of its own:
// a primary, killed with SIGKILL and restarted; then a standby streaming from
// it, cut off while the primary grants 100 more leases, and promoted after
// the primary is gone.
func TestFencesSurviveCrashAndPromotion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two clusters (about 5s); run without -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	primary, err := dbenv.NewCluster(5433)
	if err != nil {
		t.Skipf("needs local PostgreSQL server binaries (initdb, postgres, pg_basebackup): %v", err)
	}
	t.Cleanup(func() { primary.Remove() })
	if err := primary.InitDB(ctx); err != nil {
		t.Fatal(err)
	}
	repl := []string{"wal_level=replica", "max_wal_senders=4"}
	if err := primary.Start(ctx, nil, repl...); err != nil {
		t.Fatal(err)
	}
	grant := func(t *testing.T, url string, n int) int64 {
		t.Helper()
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		// Acquire, not TryAcquire: releases commit asynchronously, so the
		// last release before a crash may be lost, and its lease then runs
		// to its TTL (1s) before the key is free again.
		c, err := pglease.New(pool, pglease.WithoutAutoRenew(), pglease.WithMaxWait(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var last int64
		for i := range n {
			l, err := c.Acquire(ctx, "invoice:inv_72", time.Second)
			if err != nil {
				t.Fatalf("grant %d on %s: %v", i, url, err)
			}
			if l.Fence() <= last {
				t.Fatalf("fence %d after %d", l.Fence(), last)
			}
			last = l.Fence()
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return last
	}
	url := primary.URL("postgres")
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	pool.Close()
	before := grant(t, url, 5)

	pgtest.Step(t, "crash-restart, recovery from WAL keeps fences rising", func(t *testing.T) {
		// No shutdown checkpoint: the server recovers from WAL.
		primary.Kill(syscall.SIGKILL)
		if err := primary.Start(ctx, nil, repl...); err != nil {
			t.Fatal(err)
		}
		afterCrash := grant(t, url, 1)
		if afterCrash <= before {
			t.Fatalf("after crash-restart fence %d is not above %d", afterCrash, before)
		}
		t.Logf("crash-restart: last fence before %d, first after %d", before, afterCrash)
	})

	// An asynchronous standby that misses the newest grants.
	standby, err := dbenv.NewCluster(5434)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { standby.Remove() })
	pgtest.Step(t, "a standby streams from the primary", func(t *testing.T) {
		out, err := standby.Command(ctx, "pg_basebackup", "-D", standby.DataDir(), "-R", "-c", "fast", "-X", "stream",
			"-h", primary.SockDir, "-p", "5433", "-U", "postgres").CombinedOutput()
		if err != nil {
			t.Fatalf("pg_basebackup: %v: %s", err, out)
		}
		if err := standby.Start(ctx, nil); err != nil {
			t.Fatal(err)
		}
		replicated := grant(t, url, 3)
		waitFor(t, ctx, standby.URL("postgres"), fmt.Sprintf("SELECT fence = %d FROM lock_leases WHERE lock_key = 'invoice:inv_72'", replicated))
	})
	var lost int64
	pgtest.Step(t, "the standby is cut off, the primary grants 100 more and dies", func(t *testing.T) {
		standby.Stop() // it will never see what follows
		lost = grant(t, url, 100)
		primary.Kill(syscall.SIGKILL) // the primary dies for good
	})
	var promoted int64
	pgtest.Step(t, "the promoted standby fences above the old primary's last grant", func(t *testing.T) {
		if err := standby.Start(ctx, nil); err != nil {
			t.Fatal(err)
		}
		conn, err := pgx.Connect(ctx, standby.URL("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "SELECT pg_promote(true, 60)"); err != nil {
			t.Fatal(err)
		}
		conn.Close(ctx)
		promoted = grant(t, standby.URL("postgres"), 1)
		if promoted <= lost {
			t.Fatalf("promoted standby issued fence %d, not above the old primary's last %d", promoted, lost)
		}
	})
	pgtest.Step(t, "the timeline, not the sequence, is what saved us", func(t *testing.T) {
		const seqBits = 44
		if seq, oldSeq := promoted&(1<<seqBits-1), lost&(1<<seqBits-1); seq >= oldSeq {
			t.Fatalf("scenario not exercised: the standby's sequence (%d) did not fall behind the old primary's (%d)", seq, oldSeq)
		}
		t.Logf("promotion: old primary's last fence %d (timeline %d, seq %d); promoted standby's first %d (timeline %d, seq %d)",
			lost, lost>>seqBits, lost&(1<<seqBits-1), promoted, promoted>>seqBits, promoted&(1<<seqBits-1))
	})
}

func waitFor(t *testing.T, ctx context.Context, url, query string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			var ok bool
			err = conn.QueryRow(ctx, query).Scan(&ok)
			conn.Close(ctx)
			if err == nil && ok {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %q: %v", query, err)
		}
		time.Sleep(50 * time.Millisecond) // polled: replication is not signalled
	}
}
