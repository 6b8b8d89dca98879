package pgguard_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/testsupport/dbenv"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/migrations"
	"github.com/pgfence/pgfence/pgguard"
	"github.com/pgfence/pgfence/pglease"
)

// TestLessOrEqual: one holder writes twice with one fence; a newer fence
// locks the older out; a repeated transition is stopped by the precondition;
// zero rows are told apart.
func TestLessOrEqual(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	table := newTable(t, pool)
	insertRow(t, pool, table, "inv_72")

	var hooked []*pgguard.StaleFenceError
	counter := new(pgtest.StaleCount)
	g, err := pgguard.NewGuard(ctx, pool, pgguard.Table{Name: table, KeyColumn: "job_id"},
		pgguard.WithStaleHook(func(ctx context.Context, e *pgguard.StaleFenceError) {
			counter.Hook(ctx, e)
			hooked = append(hooked, e)
		}))
	if err != nil {
		t.Fatal(err)
	}
	if g.Table() != "public."+table {
		t.Errorf("Table() = %q", g.Table())
	}
	f := fences(t, pool, 2)
	older, newer := f[0], f[1]

	pgtest.Step(t, "one holder writes twice with one fence", func(t *testing.T) {
		// One holder, one token, two writes: "<=" lets the second through.
		if err := g.Update(ctx, pool, "inv_72", older, pgguard.Values{"status": "SENT", "writer": "A"}, pgguard.Eq("status", "PENDING")); err != nil {
			t.Fatalf("first write: %v", err)
		}
		if err := g.Update(ctx, pool, "inv_72", older, pgguard.Values{"amount": 100}); err != nil {
			t.Fatalf("second write with the same fence: %v", err)
		}
		if r := readRow(t, pool, table, "inv_72"); r.Status != "SENT" || r.Writer != "A" || r.Amount == nil || *r.Amount != 100 || r.Fence != older {
			t.Fatalf("row after A's writes: %+v", r)
		}
	})

	pgtest.Step(t, "a newer fence locks the older out", func(t *testing.T) {
		// A newer token is accepted and locks the older one out.
		if err := g.Update(ctx, pool, "inv_72", newer, pgguard.Values{"writer": "B"}); err != nil {
			t.Fatalf("newer fence: %v", err)
		}
		err := g.Update(ctx, pool, "inv_72", older, pgguard.Values{"writer": "A-late"})
		var se *pgguard.StaleFenceError
		if !errors.Is(err, pgguard.ErrStaleFence) || !errors.As(err, &se) {
			t.Fatalf("older fence after newer: got %v, want ErrStaleFence", err)
		}
		if se.Presented != older || se.Current != newer || se.Key != "inv_72" || se.Table != "public."+table {
			t.Errorf("stale error = %+v", se)
		}
		if errors.Is(err, pgguard.ErrPrecondition) || errors.Is(err, pgfence.ErrNotFound) {
			t.Errorf("stale error matches other outcomes: %v", err)
		}
	})

	pgtest.Step(t, "a repeated transition is stopped by the precondition", func(t *testing.T) {
		// SENT -> SENT by the current holder: the fence is fine, the
		// precondition stops it.
		err := g.Update(ctx, pool, "inv_72", newer, pgguard.Values{"status": "SENT", "writer": "B-again"}, pgguard.Eq("status", "PENDING"))
		if !errors.Is(err, pgguard.ErrPrecondition) || errors.Is(err, pgguard.ErrStaleFence) || errors.Is(err, pgguard.ErrAlreadyDone) {
			t.Fatalf("repeated transition: got %v, want ErrPrecondition only", err)
		}
		// Stale and precondition both fail: stale wins.
		err = g.Update(ctx, pool, "inv_72", older, pgguard.Values{"status": "SENT"}, pgguard.Eq("status", "PENDING"))
		if !errors.Is(err, pgguard.ErrStaleFence) {
			t.Fatalf("stale and wrong state: got %v, want ErrStaleFence", err)
		}
		if r := readRow(t, pool, table, "inv_72"); r.Writer != "B" || r.Fence != newer {
			t.Fatalf("refused writes changed the row: %+v", r)
		}
	})

	pgtest.Step(t, "no such row", func(t *testing.T) {
		if err := g.Update(ctx, pool, "inv_404", newer, pgguard.Values{"writer": "B"}); !errors.Is(err, pgfence.ErrNotFound) {
			t.Fatalf("missing row: got %v, want pgfence.ErrNotFound", err)
		}
	})

	pgtest.Step(t, "other preconditions", func(t *testing.T) {
		for _, c := range []struct {
			cond pgguard.Cond
			ok   bool
		}{
			{pgguard.In("status", "PENDING", "SENT"), true},
			{pgguard.In("status", "PENDING"), false},
			{pgguard.Ne("writer", "B"), false},
			{pgguard.Ne("writer", "A"), true},
			{pgguard.NotNull("amount"), true},
			{pgguard.IsNull("amount"), false},
			{pgguard.Eq("amount", nil), false},
			{pgguard.Eq("amount", 100), true},
		} {
			err := g.Check(ctx, pool, "inv_72", newer, c.cond)
			if c.ok != (err == nil) || (err != nil && !errors.Is(err, pgguard.ErrPrecondition)) {
				t.Errorf("Check(%v) = %v, want ok=%v", c.cond, err, c.ok)
			}
		}
	})

	pgtest.Step(t, "stale writes are counted and hooked", func(t *testing.T) {
		if counter.Total() != 2 || counter.ByTable()["public."+table] != 2 || len(hooked) != 2 {
			t.Errorf("counted %d (%v), hooked %d; want 2", counter.Total(), counter.ByTable(), len(hooked))
		}
		if last := counter.Last(); last == nil || last.Presented != older || last.Key != "inv_72" {
			t.Errorf("last stale write = %+v", last)
		}
	})
}

// leaseFences returns the fences of two successive leases on key: A's, which
// was let expire (no renewal) before B acquired.
func leaseFences(t *testing.T, key string) (a, b int64) {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	ca, err := pglease.New(pool, pglease.WithoutAutoRenew(), pglease.WithOwner("A"))
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	cb, err := pglease.New(pool, pglease.WithOwner("B"), pglease.WithBackoff(5*time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	la, err := ca.TryAcquire(ctx, key, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	// A is "paused": it neither renews nor releases.
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lb, err := cb.Acquire(actx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if lb.Fence() <= la.Fence() {
		t.Fatalf("fences out of order: A %d, B %d", la.Fence(), lb.Fence())
	}
	lb.Release(ctx)
	return la.Fence(), lb.Fence()
}

// TestClaimingOff asserts the documented limit: without a claim, a stale
// write that lands before the new holder's first write is accepted, because
// the row has nothing newer to compare with.
func TestClaimingOff(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	table := newTable(t, pool)
	insertRow(t, pool, table, "inv_72")
	g, err := pgguard.NewGuard(ctx, pool, pgguard.Table{Name: table, KeyColumn: "job_id"}, pgguard.WithStaleHook(new(pgtest.StaleCount).Hook))
	if err != nil {
		t.Fatal(err)
	}
	fa, fb := leaseFences(t, "invoice:off:"+table)

	// B has the lease and reads the state it inherits, without claiming.
	bRead := readRow(t, pool, table, "inv_72").Status
	// A wakes up and its write lands first: ACCEPTED (the limit).
	if err := g.Update(ctx, pool, "inv_72", fa, pgguard.Values{"status": "SENT", "writer": "A"}, pgguard.Eq("status", "PENDING")); err != nil {
		t.Fatalf("documented limit: the stale write landing first should be accepted, got %v", err)
	}
	// B proceeds from what it read before that write.
	if bRead != "PENDING" {
		t.Fatalf("B read %q", bRead)
	}
	if err := g.Update(ctx, pool, "inv_72", fb, pgguard.Values{"status": "SENT", "writer": "B"}); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	// Only from B's first write on is A refused.
	if err := g.Update(ctx, pool, "inv_72", fa, pgguard.Values{"writer": "A"}); !errors.Is(err, pgguard.ErrStaleFence) {
		t.Fatalf("A after B's write: got %v, want ErrStaleFence", err)
	}
	if r := readRow(t, pool, table, "inv_72"); r.Writer != "B" || r.Fence != fb {
		t.Fatalf("row: %+v", r)
	}
}

// TestClaimingOn: with the new holder claiming first, the stale write is
// refused wherever it lands: after the claim, after B's write but before B
// commits (it waits for B's row lock), after B commits. Landing before the
// claim, it is accepted, but B's claim then inherits what it wrote, in the
// transaction that B decides in.
func TestClaimingOn(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	table := newTable(t, pool)
	g, err := pgguard.NewGuard(ctx, pool, pgguard.Table{Name: table, KeyColumn: "job_id"}, pgguard.WithStaleHook(new(pgtest.StaleCount).Hook))
	if err != nil {
		t.Fatal(err)
	}
	aWrite := func(key string, fa int64) error {
		return g.Update(ctx, pool, key, fa, pgguard.Values{"status": "SENT", "writer": "A"}, pgguard.Eq("status", "PENDING"))
	}

	for _, lands := range []string{"after claim", "after B's write", "after commit"} {
		t.Run(lands, func(t *testing.T) {
			key := "inv_" + lands
			insertRow(t, pool, table, key)
			fa, fb := leaseFences(t, "invoice:on:"+key)

			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			var status string
			if err := g.ClaimFirst(ctx, tx, key, fb, []string{"status"}, &status); err != nil {
				t.Fatalf("claim: %v", err)
			}
			if status != "PENDING" {
				t.Fatalf("claim inherited %q", status)
			}

			var wg sync.WaitGroup
			var aErr error
			start := func() {
				wg.Add(1)
				go func() { defer wg.Done(); aErr = aWrite(key, fa) }()
			}
			// blocked waits until A's write queues for B's row lock, and
			// checks that it has not finished.
			blocked := func() {
				done := make(chan struct{})
				go func() { wg.Wait(); close(done) }()
				waitLockWait(t, pool, table)
				select {
				case <-done:
					t.Fatalf("A's write finished while B's transaction was open: %v", aErr)
				default:
				}
			}
			if lands == "after claim" {
				start()
				blocked()
			}
			if err := g.Update(ctx, tx, key, fb, pgguard.Values{"status": "SENT", "writer": "B"}, pgguard.Eq("status", "PENDING")); err != nil {
				t.Fatalf("B's write: %v", err)
			}
			if lands == "after B's write" {
				start()
				blocked()
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if lands == "after commit" {
				start()
			}
			wg.Wait()
			if !errors.Is(aErr, pgguard.ErrStaleFence) {
				t.Fatalf("A's stale write landing %s: got %v, want ErrStaleFence", lands, aErr)
			}
			if r := readRow(t, pool, table, key); r.Writer != "B" || r.Fence != fb {
				t.Fatalf("row: %+v", r)
			}
		})
	}

	t.Run("before claim", func(t *testing.T) {
		key := "inv_before"
		insertRow(t, pool, table, key)
		fa, fb := leaseFences(t, "invoice:on:"+key)
		if err := aWrite(key, fa); err != nil {
			t.Fatalf("A's write before any claim: %v", err)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		var status, writer string
		if err := g.ClaimFirst(ctx, tx, key, fb, []string{"status", "writer"}, &status, &writer); err != nil {
			t.Fatal(err)
		}
		// B decides from the state A left, not from an earlier read.
		if status != "SENT" || writer != "A" {
			t.Fatalf("claim inherited %q by %q, want SENT by A", status, writer)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := aWrite(key, fa); !errors.Is(err, pgguard.ErrStaleFence) {
			t.Fatalf("A after B's claim: %v", err)
		}
	})

	t.Run("claim outcomes", func(t *testing.T) {
		key := "inv_claims"
		insertRow(t, pool, table, key)
		f := fences(t, pool, 2)
		if err := g.ClaimFirst(ctx, pool, key, f[1], nil); err != nil {
			t.Fatal(err)
		}
		if err := g.ClaimFirst(ctx, pool, key, f[1], nil); err != nil {
			t.Fatalf("re-claim with the same fence: %v", err)
		}
		var se *pgguard.StaleFenceError
		if err := g.ClaimFirst(ctx, pool, key, f[0], nil); !errors.As(err, &se) || se.Current != f[1] || se.Presented != f[0] {
			t.Fatalf("claim by an older holder: %v", err)
		}
		if err := g.ClaimFirst(ctx, pool, "inv_404", f[1], nil); !errors.Is(err, pgfence.ErrNotFound) {
			t.Fatalf("claim of a missing row: %v", err)
		}
	})
}

// TestGuardInCallersTransaction: a guarded write is part of the caller's
// transaction, and rolls back with it.
func TestGuardInCallersTransaction(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	table := newTable(t, pool)
	insertRow(t, pool, table, "k")
	g, err := pgguard.NewGuard(ctx, pool, pgguard.Table{Name: table, KeyColumn: "job_id"})
	if err != nil {
		t.Fatal(err)
	}
	f := fences(t, pool, 1)[0]
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := g.Update(ctx, tx, "k", f, pgguard.Values{"writer": "T"}); err != nil {
			return err
		}
		return errors.New("roll back")
	})
	if err == nil || err.Error() != "roll back" {
		t.Fatal(err)
	}
	if r := readRow(t, pool, table, "k"); r.Writer != "" || r.Fence != 0 {
		t.Fatalf("rolled-back write is visible: %+v", r)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if err := g.Update(ctx, conn.Conn(), "k", f, pgguard.Values{"writer": "C"}); err != nil {
		t.Fatalf("on a *pgx.Conn: %v", err)
	}
}

// TestConcurrentHolders: holders with increasing fences hammer one row at
// once. Once a holder is told it is stale it is never accepted again, and
// the newest holder always is.
func TestConcurrentHolders(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	table := newTable(t, pool)
	insertRow(t, pool, table, "hot")
	g, err := pgguard.NewGuard(ctx, pool, pgguard.Table{Name: table, KeyColumn: "job_id"}, pgguard.WithStaleHook(new(pgtest.StaleCount).Hook))
	if err != nil {
		t.Fatal(err)
	}
	fs := fences(t, pool, 8)
	var wg sync.WaitGroup
	for i, f := range fs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stale := false
			for n := 0; n < 40; n++ {
				err := g.Update(ctx, pool, "hot", f, pgguard.Values{"writer": fmt.Sprint(i)})
				switch {
				case err == nil && stale:
					t.Errorf("holder %d accepted after it was told it is stale", i)
					return
				case err == nil:
				case errors.Is(err, pgguard.ErrStaleFence):
					stale = true
					if i == len(fs)-1 {
						t.Errorf("the newest holder was told it is stale: %v", err)
						return
					}
				default:
					t.Errorf("holder %d: %v", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if r := readRow(t, pool, table, "hot"); r.Fence != fs[len(fs)-1] || r.Writer != fmt.Sprint(len(fs)-1) {
		t.Fatalf("final row %+v, want the newest holder's", r)
	}
}

// TestMigrationDown: the migrations revert cleanly, and refuse to drop
// the trigger function while a table still uses it rather than silently
// removing that table's enforcement.
func TestMigrationDown(t *testing.T) {
	ctx := context.Background()
	url, drop, err := dbenv.CreateDatabase(ctx, pgtest.ServerURL(), "pgfence_test_")
	if err != nil {
		t.Fatal(err)
	}
	defer drop()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "CREATE TABLE fenced (id int PRIMARY KEY, last_fence bigint NOT NULL DEFAULT 0)"); err != nil {
		t.Fatal(err)
	}
	if err := pgguard.InstallTrigger(ctx, pool, pgguard.Table{Name: "fenced"}, pgguard.Lenient); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Down(ctx, pool); err == nil {
		t.Fatal("Down dropped the trigger function while a table uses it")
	} else {
		t.Logf("Down with a fenced table: %v", err)
	}
	// As an operator would: remove the trigger, then "migrate force 8" (the
	// failed down, rolled back whole, left version 8 dirty).
	if err := pgguard.RemoveTrigger(ctx, pool, pgguard.Table{Name: "fenced"}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "UPDATE "+migrations.Table+" SET version = 8, dirty = false"); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Down(ctx, pool); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_proc WHERE proname = 'pgfence_enforce_fence'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("trigger function left behind: %d %v", n, err)
	}
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatalf("up again: %v", err)
	}
}

// TestRepeatableRead: in a REPEATABLE READ transaction whose snapshot
// predates a newer holder's write, the guarded write fails with SQLSTATE
// 40001, as Update's documentation says; it never lands.
func TestRepeatableRead(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	table := newTable(t, pool)
	insertRow(t, pool, table, "k")
	g, err := pgguard.NewGuard(ctx, pool, pgguard.Table{Name: table, KeyColumn: "job_id"}, pgguard.WithStaleHook(new(pgtest.StaleCount).Hook))
	if err != nil {
		t.Fatal(err)
	}
	f := fences(t, pool, 2)
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var status string
	if err := tx.QueryRow(ctx, "SELECT status FROM "+table+" WHERE job_id = 'k'").Scan(&status); err != nil {
		t.Fatal(err)
	}
	if err := g.Update(ctx, pool, "k", f[1], pgguard.Values{"writer": "B"}); err != nil {
		t.Fatal(err)
	}
	err = g.Update(ctx, tx, "k", f[0], pgguard.Values{"writer": "A"})
	if sqlState(err) != pgerrcode.SerializationFailure {
		t.Fatalf("stale write in an older snapshot: got %v, want SQLSTATE 40001", err)
	}
	tx.Rollback(ctx)
	// In a snapshot taken after the newer write, it is plainly stale.
	err = pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		return g.Update(ctx, tx, "k", f[0], pgguard.Values{"writer": "A"})
	})
	if !errors.Is(err, pgguard.ErrStaleFence) {
		t.Fatalf("stale write in a newer snapshot: %v", err)
	}
	if r := readRow(t, pool, table, "k"); r.Writer != "B" {
		t.Fatalf("row: %+v", r)
	}
}

// WithDoneWhen tells "already done" from "not ready" in one answer.
func TestDoneWhen(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	table := newTable(t, pool)
	insertRow(t, pool, table, "inv_done")
	insertRow(t, pool, table, "inv_draft")
	if _, err := pool.Exec(ctx, fmt.Sprintf("UPDATE %s SET status = 'DRAFT' WHERE job_id = 'inv_draft'", table)); err != nil {
		t.Fatal(err)
	}
	g, err := pgguard.NewGuard(ctx, pool, pgguard.Table{Name: table, KeyColumn: "job_id"},
		pgguard.WithDoneWhen(pgguard.Eq("status", "SENT")))
	if err != nil {
		t.Fatal(err)
	}
	f := fences(t, pool, 1)[0]
	send := func(key string) error {
		return g.Update(ctx, pool, key, f, pgguard.Values{"status": "SENT"}, pgguard.Eq("status", "PENDING"))
	}
	if err := send("inv_done"); err != nil {
		t.Fatal(err)
	}
	if err := send("inv_done"); !errors.Is(err, pgguard.ErrAlreadyDone) || !errors.Is(err, pgguard.ErrPrecondition) {
		t.Fatalf("repeat: %v, want ErrAlreadyDone (and ErrPrecondition)", err)
	}
	if err := send("inv_draft"); !errors.Is(err, pgguard.ErrPrecondition) || errors.Is(err, pgguard.ErrAlreadyDone) {
		t.Fatalf("not ready: %v, want ErrPrecondition without ErrAlreadyDone", err)
	}
	if _, err := pgguard.NewGuard(ctx, pool, pgguard.Table{Name: table, KeyColumn: "job_id"},
		pgguard.WithDoneWhen(pgguard.Eq("no_such_column", "SENT"))); !errors.Is(err, pgfence.ErrInvalidInput) {
		t.Fatalf("unknown done column: %v", err)
	}
}
