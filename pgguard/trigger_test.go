package pgguard_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/internal/pgerr"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pgguard"
)

// accountsTable creates a table without a fence column, as a user's table
// would be before pgguard, with rows 1..n.
func accountsTable(t *testing.T, pool *pgxpool.Pool, n int) string {
	t.Helper()
	name := fmt.Sprintf("accounts_%d", tableSeq.Add(1))
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+name+" (id integer PRIMARY KEY, balance integer NOT NULL DEFAULT 0)"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+name+" (id) SELECT generate_series(1, $1::int)", n); err != nil {
		t.Fatal(err)
	}
	return name
}

type account struct {
	exists  bool
	balance int
	fence   int64
}

func readAccount(t *testing.T, pool *pgxpool.Pool, table string, id int) account {
	t.Helper()
	var a account
	err := pool.QueryRow(context.Background(), "SELECT balance, last_fence FROM "+table+" WHERE id = $1", id).Scan(&a.balance, &a.fence)
	if errors.Is(err, pgx.ErrNoRows) {
		return a
	}
	if err != nil {
		t.Fatal(err)
	}
	a.exists = true
	return a
}

func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// raw runs a hand-written statement, without any fence predicate, in a
// transaction with fence set (none when fence is 0).
func raw(ctx context.Context, pool *pgxpool.Pool, fence int64, sql string, args ...any) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if fence != 0 {
			if err := pgguard.SetFence(ctx, tx, fence); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, sql, args...)
		return err
	})
}

func TestTriggerStrict(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	table := accountsTable(t, pool, 3)
	tbl := pgguard.Table{Name: table}
	pgtest.Step(t, "install: the fence column twice, then the trigger", func(t *testing.T) {
		if err := addFenceColumn(ctx, pool, tbl); err != nil {
			t.Fatal(err)
		}
		if err := addFenceColumn(ctx, pool, tbl); err != nil {
			t.Fatalf("the fence column's migration a second time: %v", err)
		}
		if _, ok, err := pgguard.TriggerEnforcement(ctx, pool, tbl); err != nil || ok {
			t.Fatalf("TriggerEnforcement before install: ok=%v err=%v", ok, err)
		}
		if err := pgguard.InstallTrigger(ctx, pool, tbl, pgguard.Strict); err != nil {
			t.Fatal(err)
		}
		if m, ok, err := pgguard.TriggerEnforcement(ctx, pool, tbl); err != nil || !ok || m != pgguard.Strict {
			t.Fatalf("TriggerEnforcement = %v %v %v", m, ok, err)
		}
	})

	f := fences(t, pool, 3)
	older, newer := f[0], f[1]
	// Counts the stale refusals seen through Classify and RunFenced.
	counter := new(pgtest.StaleCount)

	pgtest.Step(t, "INSERT is not checked", func(t *testing.T) {
		if _, err := pool.Exec(ctx, "INSERT INTO "+table+" (id) VALUES (4)"); err != nil {
			t.Fatalf("unfenced INSERT: %v", err)
		}
	})

	pgtest.Step(t, "a fenced UPDATE stamps its fence", func(t *testing.T) {
		// A fenced UPDATE stamps its fence on the row.
		if err := raw(ctx, pool, older, "UPDATE "+table+" SET balance = 10 WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
		if a := readAccount(t, pool, table, 1); a.balance != 10 || a.fence != older {
			t.Fatalf("after fenced update: %+v", a)
		}
		if err := raw(ctx, pool, newer, "UPDATE "+table+" SET balance = 20 WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
	})

	pgtest.Step(t, "a stale hand-written UPDATE is refused and classified", func(t *testing.T) {
		// The stale holder's hand-written UPDATE, which forgot the predicate.
		err := raw(ctx, pool, older, "UPDATE "+table+" SET balance = 666 WHERE id = 1")
		if sqlState(err) != pgerr.StaleFence {
			t.Fatalf("stale raw UPDATE: got %v, want SQLSTATE PF001", err)
		}
		err = pgguard.Classify(err)
		var se *pgguard.StaleFenceError
		if !errors.Is(err, pgguard.ErrStaleFence) || !errors.As(err, &se) {
			t.Fatalf("Classify: %v", err)
		}
		counter.Hook(ctx, se)
		if se.Presented != older || se.Current != newer || se.Table != "public."+table || se.Key != "" {
			t.Errorf("classified: %+v", se)
		}
		if counter.Total() != 1 || counter.ByTable()["public."+table] != 1 {
			t.Errorf("counter: %d %v", counter.Total(), counter.ByTable())
		}
		t.Logf("trigger's message: %v", se.Err)
	})

	pgtest.Step(t, "a stale DELETE or whole-table UPDATE is refused", func(t *testing.T) {
		// ... and its DELETE.
		err := raw(ctx, pool, older, "DELETE FROM "+table+" WHERE id = 1")
		if !errors.Is(pgguard.Classify(err), pgguard.ErrStaleFence) {
			t.Fatalf("stale raw DELETE: %v", err)
		}
		// A whole-table statement is refused as a whole if it touches one
		// newer row.
		err = raw(ctx, pool, older, "UPDATE "+table+" SET balance = balance + 1")
		if !errors.Is(pgguard.Classify(err), pgguard.ErrStaleFence) {
			t.Fatalf("stale whole-table UPDATE: %v", err)
		}
		if a := readAccount(t, pool, table, 1); !a.exists || a.balance != 20 || a.fence != newer {
			t.Fatalf("refused statements changed the row: %+v", a)
		}
		if a := readAccount(t, pool, table, 2); a.balance != 0 || a.fence != 0 {
			t.Fatalf("refused statement changed another row: %+v", a)
		}
	})

	pgtest.Step(t, "RunFenced classifies and counts", func(t *testing.T) {
		err := pgguard.RunFenced(ctx, pool, older, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "DELETE FROM "+table+" WHERE id = 1")
			return err
		}, pgguard.WithStaleHook(counter.Hook))
		var se *pgguard.StaleFenceError
		if !errors.As(err, &se) || se.Current != newer {
			t.Fatalf("RunFenced stale DELETE: %v", err)
		}
		if counter.Total() != 2 {
			t.Errorf("counter after RunFenced: %d", counter.Total())
		}
	})

	pgtest.Step(t, "strict: a statement without a fence is refused", func(t *testing.T) {
		// Strict: no fence set, refused.
		for _, sql := range []string{"UPDATE " + table + " SET balance = 1 WHERE id = 2", "DELETE FROM " + table + " WHERE id = 2"} {
			_, err := pool.Exec(ctx, sql)
			if sqlState(err) != pgerr.NoFence || !errors.Is(pgguard.Classify(err), pgguard.ErrNoFence) {
				t.Fatalf("strict, no fence, %q: got %v, want SQLSTATE PF002", sql, err)
			}
		}
		// A fence left over from an earlier transaction on the same connection
		// does not count: it was transaction-local.
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tx, _ := conn.Begin(ctx)
		pgguard.SetFence(ctx, tx, newer)
		tx.Commit(ctx)
		if _, err := conn.Exec(ctx, "UPDATE "+table+" SET balance = 1 WHERE id = 2"); sqlState(err) != pgerr.NoFence {
			t.Fatalf("fence leaked past its transaction: %v", err)
		}
		conn.Release()
		if a := readAccount(t, pool, table, 2); !a.exists || a.balance != 0 {
			t.Fatalf("refused unfenced statements changed the row: %+v", a)
		}
	})

	pgtest.Step(t, "no UPDATE lowers a fence or raises it past its own", func(t *testing.T) {
		// No UPDATE lowers a row's fence, even one that tries.
		if err := raw(ctx, pool, newer, "UPDATE "+table+" SET last_fence = 0, balance = 21 WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
		if a := readAccount(t, pool, table, 1); a.balance != 21 || a.fence != newer {
			t.Fatalf("fence lowered: %+v", a)
		}
		// ... nor raises it past the fence its transaction holds, which would
		// lock out the holders to come.
		if err := raw(ctx, pool, newer, "UPDATE "+table+" SET last_fence = 9223372036854775807 WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
		if a := readAccount(t, pool, table, 1); a.fence != newer {
			t.Fatalf("fence raised past the transaction's: %+v", a)
		}
	})

	pgtest.Step(t, "an operator override locks out every holder", func(t *testing.T) {
		// An operator's override: a fresh fence, which locks out every holder.
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT pgfence_set_fence(pgfence_next_fence())"); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "UPDATE "+table+" SET balance = 0 WHERE id = 1")
			return err
		})
		if err != nil {
			t.Fatalf("operator override: %v", err)
		}
		if a := readAccount(t, pool, table, 1); a.fence <= newer {
			t.Fatalf("override did not stamp a fresh fence: %+v", a)
		}
		if err := raw(ctx, pool, newer, "UPDATE "+table+" SET balance = 5 WHERE id = 1"); !errors.Is(pgguard.Classify(err), pgguard.ErrStaleFence) {
			t.Fatalf("holder after the override: %v", err)
		}
	})

	pgtest.Step(t, "guarded writes and claims work on a strict table", func(t *testing.T) {
		// Guarded writes and claims work on a strict table: they carry their
		// fence into the trigger in the same statement.
		g, err := pgguard.NewGuard(ctx, pool, pgguard.Table{Name: table, KeyColumn: "id"})
		if err != nil {
			t.Fatal(err)
		}
		latest := fences(t, pool, 1)[0]
		if err := g.Update(ctx, pool, 3, latest, pgguard.Values{"balance": 30}); err != nil {
			t.Fatalf("guarded write on a strict table: %v", err)
		}
		var bal int
		if err := g.ClaimFirst(ctx, pool, 2, latest, []string{"balance"}, &bal); err != nil {
			t.Fatalf("claim on a strict table: %v", err)
		}
		if err := g.Update(ctx, pool, 3, f[2], pgguard.Values{"balance": 31}); !errors.Is(err, pgguard.ErrStaleFence) {
			t.Fatalf("stale guarded write on a strict table: %v", err)
		}
		// A DELETE with a current fence is allowed.
		if err := raw(ctx, pool, latest, "DELETE FROM "+table+" WHERE id = 3"); err != nil {
			t.Fatalf("fenced DELETE: %v", err)
		}
	})

	pgtest.Step(t, "removing the trigger removes enforcement", func(t *testing.T) {
		if err := pgguard.RemoveTrigger(ctx, pool, tbl); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := pgguard.TriggerEnforcement(ctx, pool, tbl); ok {
			t.Fatal("trigger still there")
		}
		if _, err := pool.Exec(ctx, "UPDATE "+table+" SET balance = 99 WHERE id = 2"); err != nil {
			t.Fatalf("after RemoveTrigger: %v", err)
		}
	})
}

func TestTriggerLenient(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	table := accountsTable(t, pool, 3)
	tbl := pgguard.Table{Name: table}
	if err := addFenceColumn(ctx, pool, tbl); err != nil {
		t.Fatal(err)
	}
	// Strict first, then replaced by lenient.
	if err := pgguard.InstallTrigger(ctx, pool, tbl, pgguard.Strict); err != nil {
		t.Fatal(err)
	}
	if err := pgguard.InstallTrigger(ctx, pool, tbl, pgguard.Lenient); err != nil {
		t.Fatal(err)
	}
	if m, ok, err := pgguard.TriggerEnforcement(ctx, pool, tbl); err != nil || !ok || m != pgguard.Lenient {
		t.Fatalf("TriggerEnforcement = %v %v %v", m, ok, err)
	}
	f := fences(t, pool, 2)
	older, newer := f[0], f[1]
	if err := raw(ctx, pool, newer, "UPDATE "+table+" SET balance = 10 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}

	pgtest.Step(t, "no fence: allowed, and the row's fence stays", func(t *testing.T) {
		// No fence: allowed, and the row's fence stays.
		if _, err := pool.Exec(ctx, "UPDATE "+table+" SET balance = 11 WHERE id = 1"); err != nil {
			t.Fatalf("lenient, no fence: %v", err)
		}
		if a := readAccount(t, pool, table, 1); a.balance != 11 || a.fence != newer {
			t.Fatalf("after unfenced update: %+v", a)
		}
		// ... even when the statement tries to lower it.
		if _, err := pool.Exec(ctx, "UPDATE "+table+" SET last_fence = 0 WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
		if a := readAccount(t, pool, table, 1); a.fence != newer {
			t.Fatalf("unfenced update lowered the fence: %+v", a)
		}
		if _, err := pool.Exec(ctx, "UPDATE "+table+" SET last_fence = last_fence + 1000 WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
		if a := readAccount(t, pool, table, 1); a.fence != newer {
			t.Fatalf("unfenced update raised the fence: %+v", a)
		}
		if _, err := pool.Exec(ctx, "DELETE FROM "+table+" WHERE id = 2"); err != nil {
			t.Fatalf("lenient, no fence, DELETE: %v", err)
		}
		if a := readAccount(t, pool, table, 2); a.exists {
			t.Fatal("row 2 not deleted")
		}
	})

	pgtest.Step(t, "a fence that is set is checked", func(t *testing.T) {
		// A fence that is set is checked, as in strict mode.
		if err := raw(ctx, pool, older, "UPDATE "+table+" SET balance = 666 WHERE id = 1"); !errors.Is(pgguard.Classify(err), pgguard.ErrStaleFence) {
			t.Fatalf("lenient, stale UPDATE: %v", err)
		}
		if err := raw(ctx, pool, older, "DELETE FROM "+table+" WHERE id = 1"); !errors.Is(pgguard.Classify(err), pgguard.ErrStaleFence) {
			t.Fatalf("lenient, stale DELETE: %v", err)
		}
		if a := readAccount(t, pool, table, 1); !a.exists || a.balance != 11 {
			t.Fatalf("stale statements changed the row: %+v", a)
		}
	})
}

// TestMigrationSQL: the helpers for users' own migration files produce
// quoted SQL that applies.
func TestMigrationSQL(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS "Mixed_Case$Orders"; CREATE TABLE "Mixed_Case$Orders" (id bigint PRIMARY KEY, state text)`); err != nil {
		t.Fatal(err)
	}
	tbl := pgguard.Table{Schema: "public", Name: "Mixed_Case$Orders", FenceColumn: "Fence"}
	up, down, err := pgguard.FenceColumnMigration(tbl)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fence column up:\n%sdown:\n%s", up, down)
	tup, tdown, err := pgguard.TriggerMigration(tbl, pgguard.Strict)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("trigger up:\n%sdown:\n%s", tup, tdown)
	pgtest.Step(t, "up installs the column and a strict trigger", func(t *testing.T) {
		for _, sql := range []string{up, tup} {
			if _, err := pool.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
		if m, ok, err := pgguard.TriggerEnforcement(ctx, pool, tbl); err != nil || !ok || m != pgguard.Strict {
			t.Fatalf("TriggerEnforcement = %v %v %v", m, ok, err)
		}
	})

	pgtest.Step(t, "guarded and raw writes on the migrated table", func(t *testing.T) {
		if _, err := pool.Exec(ctx, `INSERT INTO "Mixed_Case$Orders" VALUES (1, 'new')`); err != nil {
			t.Fatal(err)
		}
		g, err := pgguard.NewGuard(ctx, pool, pgguard.Table{Name: "Mixed_Case$Orders", KeyColumn: "id", FenceColumn: "Fence"})
		if err != nil {
			t.Fatal(err)
		}
		f := fences(t, pool, 2)
		if err := g.Update(ctx, pool, int64(1), f[1], pgguard.Values{"state": "paid"}, pgguard.Eq("state", "new")); err != nil {
			t.Fatal(err)
		}
		// The generic (non-last_fence) path owns its column too.
		if err := raw(ctx, pool, f[1], `UPDATE "Mixed_Case$Orders" SET "Fence" = 0`); err != nil {
			t.Fatal(err)
		}
		if err := raw(ctx, pool, f[1], `UPDATE "Mixed_Case$Orders" SET "Fence" = "Fence" + 1000`); err != nil {
			t.Fatal(err)
		}
		var fence int64
		if err := pool.QueryRow(ctx, `SELECT "Fence" FROM "Mixed_Case$Orders" WHERE id = 1`).Scan(&fence); err != nil || fence != f[1] {
			t.Fatalf("generic path: fence %d (%v), want %d", fence, err, f[1])
		}
		if _, err := pool.Exec(ctx, `UPDATE "Mixed_Case$Orders" SET state = 'x'`); sqlState(err) != pgerr.NoFence {
			t.Fatalf("strict trigger from the migration: %v", err)
		}
		if err := raw(ctx, pool, f[0], `UPDATE "Mixed_Case$Orders" SET state = 'x'`); !errors.Is(pgguard.Classify(err), pgguard.ErrStaleFence) {
			t.Fatalf("stale: %v", err)
		}
	})

	pgtest.Step(t, "down removes enforcement", func(t *testing.T) {
		for _, sql := range []string{tdown, down} {
			if _, err := pool.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
		if _, err := pool.Exec(ctx, `UPDATE "Mixed_Case$Orders" SET state = 'x'`); err != nil {
			t.Fatalf("after down: %v", err)
		}
	})
}

// TestRunFencedCountsOnce: a stale guarded write inside RunFenced is counted
// once, by the Guard, not again by RunFenced.
func TestRunFencedCountsOnce(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	table := newTable(t, pool)
	insertRow(t, pool, table, "k")
	c := new(pgtest.StaleCount)
	g, err := pgguard.NewGuard(ctx, pool, pgguard.Table{Name: table, KeyColumn: "job_id"}, pgguard.WithStaleHook(c.Hook))
	if err != nil {
		t.Fatal(err)
	}
	f := fences(t, pool, 2)
	if err := g.Update(ctx, pool, "k", f[1], nil); err != nil {
		t.Fatal(err)
	}
	err = pgguard.RunFenced(ctx, pool, f[0], func(tx pgx.Tx) error {
		return g.Update(ctx, tx, "k", f[0], pgguard.Values{"writer": "A"})
	}, pgguard.WithStaleHook(c.Hook))
	if !errors.Is(err, pgguard.ErrStaleFence) || c.Total() != 1 {
		t.Fatalf("err %v, counted %d; want ErrStaleFence counted once", err, c.Total())
	}
}

// A table whose name needs quotes (a space) is named in full in the
// trigger's stale-fence refusal, as the Guard names it, so that counters by
// table add both up under one name.
func TestTriggerStaleNamesQuotedTable(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	name := fmt.Sprintf("My Jobs %d", tableSeq.Add(1))
	tbl := pgguard.Table{Name: name, KeyColumn: "id"}
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+ident+" (id integer PRIMARY KEY, balance integer NOT NULL DEFAULT 0); INSERT INTO "+ident+" (id) VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if err := addFenceColumn(ctx, pool, tbl); err != nil {
		t.Fatal(err)
	}
	if err := pgguard.InstallTrigger(ctx, pool, tbl, pgguard.Strict); err != nil {
		t.Fatal(err)
	}
	g, err := pgguard.NewGuard(ctx, pool, tbl)
	if err != nil {
		t.Fatal(err)
	}
	f := fences(t, pool, 2)
	older, newer := f[0], f[1]
	if err := raw(ctx, pool, newer, "UPDATE "+ident+" SET balance = 1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	err = raw(ctx, pool, older, "UPDATE "+ident+" SET balance = 2 WHERE id = 1")
	var se *pgguard.StaleFenceError
	if !errors.As(pgguard.Classify(err), &se) {
		t.Fatalf("stale write through the trigger: %v, want a stale fence refusal", err)
	}
	if want := `public."` + name + `"`; se.Table != want || se.Table != g.Table() {
		t.Fatalf("refusal names table %q, want %q (the Guard says %q)", se.Table, want, g.Table())
	}
	if se.Presented != older || se.Current != newer {
		t.Fatalf("presented %d current %d, want %d and %d", se.Presented, se.Current, older, newer)
	}
}
