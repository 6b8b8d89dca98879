package pgguard_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/internal/pgerr"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pgguard"
)

// fencedAccounts is accountsTable with a fence column and a trigger in mode.
func fencedAccounts(t *testing.T, pool *pgxpool.Pool, n int, mode pgguard.Enforcement) string {
	t.Helper()
	ctx := context.Background()
	table := accountsTable(t, pool, n)
	if err := addFenceColumn(ctx, pool, pgguard.Table{Name: table}); err != nil {
		t.Fatal(err)
	}
	if err := pgguard.InstallTrigger(ctx, pool, pgguard.Table{Name: table}, mode); err != nil {
		t.Fatal(err)
	}
	return table
}

// TestFenceBoundToTransaction: only a fence set by the transaction itself,
// with pgfence_set_fence, counts. A session-level setting, a plain
// set_config (the old way) and a bound value copied from an earlier
// transaction are refused with PF003 in both modes, and change nothing.
func TestFenceBoundToTransaction(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	f := fences(t, pool, 1)[0]
	for _, mode := range []pgguard.Enforcement{pgguard.Strict, pgguard.Lenient} {
		t.Run(string(mode), func(t *testing.T) {
			table := fencedAccounts(t, pool, 2, mode)
			update := "UPDATE " + table + " SET balance = balance + 1 WHERE id = 1"

			// tx1 sets its fence and writes; its bound value is read back.
			var bound string
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if err := pgguard.SetFence(ctx, tx, f); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, update); err != nil {
					return err
				}
				return tx.QueryRow(ctx, "SELECT current_setting('pgfence.fence')").Scan(&bound)
			})
			if err != nil {
				t.Fatalf("fenced transaction: %v", err)
			}
			t.Logf("bound value: %s", bound)

			conn, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// Each way of setting pgfence.fence that is not this
			// transaction's pgfence_set_fence, then an UPDATE and a DELETE.
			// A session-level value is set before the transaction, in
			// autocommit, and lingers on the connection after it.
			for _, c := range []struct {
				name, set string
				session   bool
			}{
				{"session-level SET", fmt.Sprintf("SET pgfence.fence = '%d'", f), true},
				{"session-level set_config", fmt.Sprintf("SELECT set_config('pgfence.fence', '%d', false)", f), true},
				{"session-level bound value", fmt.Sprintf("SET pgfence.fence = '%s'", bound), true},
				{"plain transaction-local", fmt.Sprintf("SELECT set_config('pgfence.fence', '%d', true)", f), false},
				{"tx1's value in a later transaction", fmt.Sprintf("SELECT set_config('pgfence.fence', '%s', true)", bound), false},
			} {
				// step: a failed case may leave its session-level value behind.
				pgtest.Step(t, c.name, func(t *testing.T) {
					for _, sql := range []string{update, "DELETE FROM " + table + " WHERE id = 2"} {
						if c.session {
							if _, err := conn.Exec(ctx, c.set); err != nil {
								t.Fatal(err)
							}
						}
						err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
							if !c.session {
								if _, err := tx.Exec(ctx, c.set); err != nil {
									return err
								}
							}
							_, err := tx.Exec(ctx, sql)
							return err
						})
						if sqlState(err) != pgerr.UnboundFence || !errors.Is(pgguard.Classify(err), pgguard.ErrNoFence) {
							t.Fatalf("%s, %q: got %v, want SQLSTATE PF003", c.name, sql, err)
						}
						if c.session {
							// A later statement that sets nothing is refused too
							// while the session-level value lingers.
							if _, err := conn.Exec(ctx, sql); sqlState(err) != pgerr.UnboundFence {
								t.Fatalf("%s, later unfenced %q: %v", c.name, sql, err)
							}
							if _, err := conn.Exec(ctx, "RESET pgfence.fence"); err != nil {
								t.Fatal(err)
							}
						}
					}
				})
			}
			_, err = conn.Exec(ctx, fmt.Sprintf("SET pgfence.fence = '%d'", f))
			if err == nil {
				_, err = conn.Exec(ctx, update)
				t.Logf("PF003 says: %v", err)
				conn.Exec(ctx, "RESET pgfence.fence")
			}
			// With nothing set at all, the modes differ as before.
			_, err = conn.Exec(ctx, "UPDATE "+table+" SET balance = balance WHERE id = 1")
			conn.Release()
			if mode == pgguard.Strict && sqlState(err) != pgerr.NoFence {
				t.Fatalf("strict, no fence: %v", err)
			}
			if mode == pgguard.Lenient && err != nil {
				t.Fatalf("lenient, no fence: %v", err)
			}
			if a := readAccount(t, pool, table, 1); a.balance != 1 || a.fence != f {
				t.Fatalf("refused statements changed row 1: %+v", a)
			}
			if a := readAccount(t, pool, table, 2); !a.exists {
				t.Fatal("a refused DELETE removed row 2")
			}
		})
	}
}

// TestSessionFenceOnPooledConnection: the scenario. On a pool of one
// connection (so both clients share it, as behind PgBouncer in transaction
// mode), client A sets pgfence.fence at session level and gives the
// connection back; client B, which holds no fence, then updates a strict
// table through the same connection. B is refused, and the row keeps A's
// fence.
func TestSessionFenceOnPooledConnection(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	table := fencedAccounts(t, pool, 1, pgguard.Strict)
	f := fences(t, pool, 1)[0]

	var pidA, pidB int
	// Client A: a session-level SET (the mistake), then its own fenced write.
	a, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pidA); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Exec(ctx, fmt.Sprintf("SET pgfence.fence = '%d'", f)); err != nil {
		t.Fatal(err)
	}
	a.Release()

	// Client B: no fence of its own.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pidB); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE "+table+" SET balance = 666 WHERE id = 1")
		return err
	})
	if pidA != pidB {
		t.Fatalf("the clients did not share the connection (%d, %d): the test proves nothing", pidA, pidB)
	}
	if !errors.Is(pgguard.Classify(err), pgguard.ErrNoFence) {
		t.Fatalf("client B on A's leftover session fence: got %v, want ErrNoFence (PF003)", err)
	}
	if acc := readAccount(t, pool, table, 1); acc.balance != 0 || acc.fence != 0 {
		t.Fatalf("B's write landed: %+v", acc)
	}
	// A client that sets its own fence properly is fine on that connection.
	if err := raw(ctx, pool, f, "UPDATE "+table+" SET balance = 1 WHERE id = 1"); err != nil {
		t.Fatalf("properly fenced write on the same connection: %v", err)
	}
	pool.Exec(ctx, "RESET pgfence.fence")
}

// TestFenceCeiling: a fence above the highest pgfence has issued is refused
// by every way pgguard sets a fence, and nothing is written; the ceiling
// itself is accepted; WithOwnFenceSource turns the check off. (Package
// payouts tests its transitions the same way.)
func TestFenceCeiling(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	table := newTable(t, pool)
	insertRow(t, pool, table, "k")
	if err := pgguard.InstallTrigger(ctx, pool, pgguard.Table{Name: table}, pgguard.Strict); err != nil {
		t.Fatal(err)
	}
	issued := fences(t, pool, 1)[0]
	var ceiling int64
	if err := pool.QueryRow(ctx, "SELECT pgfence_fence_ceiling()").Scan(&ceiling); err != nil {
		t.Fatal(err)
	}
	if ceiling < issued {
		t.Fatalf("ceiling %d below the fence just issued, %d", ceiling, issued)
	}
	const madeUp = int64(1) << 62
	g, err := pgguard.NewGuard(ctx, pool, pgguard.Table{Name: table, KeyColumn: "job_id"})
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Step(t, "a fence above the ceiling is refused everywhere, nothing written", func(t *testing.T) {
		refused := map[string]func(fence int64) error{
			"SetFence": func(fence int64) error {
				return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return pgguard.SetFence(ctx, tx, fence) })
			},
			"RunFenced": func(fence int64) error {
				return pgguard.RunFenced(ctx, pool, fence, func(tx pgx.Tx) error {
					_, err := tx.Exec(ctx, "UPDATE "+table+" SET writer = 'run' WHERE job_id = 'k'")
					return err
				})
			},
			"Guard.Update":     func(fence int64) error { return g.Update(ctx, pool, "k", fence, pgguard.Values{"writer": "update"}) },
			"Guard.ClaimFirst": func(fence int64) error { return g.ClaimFirst(ctx, pool, "k", fence, nil) },
			"Guard.Check":      func(fence int64) error { return g.Check(ctx, pool, "k", fence) },
		}
		for name, f := range refused {
			for _, fence := range []int64{madeUp, ceiling + 1} {
				err := f(fence)
				if !errors.Is(err, pgguard.ErrFenceAboveCeiling) {
					t.Errorf("%s(%d): got %v, want ErrFenceAboveCeiling", name, fence, err)
				} else if fence == madeUp {
					t.Logf("%s: %v", name, err)
				}
			}
		}
		if r := readRow(t, pool, table, "k"); r.Fence != 0 || r.Writer != "" {
			t.Fatalf("a refused fence was written: %+v", r)
		}
	})

	pgtest.Step(t, "the highest issued fence is accepted", func(t *testing.T) {
		// The highest issued fence itself is fine.
		if err := g.Update(ctx, pool, "k", issued, pgguard.Values{"writer": "issued"}); err != nil {
			t.Fatalf("issued fence: %v", err)
		}
	})

	pgtest.Step(t, "WithOwnFenceSource: no ceiling", func(t *testing.T) {
		// Fences from a source of one's own: no ceiling.
		own := pgguard.WithOwnFenceSource()
		og, err := pgguard.NewGuard(ctx, pool, pgguard.Table{Name: table, KeyColumn: "job_id"}, own)
		if err != nil {
			t.Fatal(err)
		}
		if err := og.Update(ctx, pool, "k", madeUp, pgguard.Values{"writer": "own"}); err != nil {
			t.Fatalf("WithOwnFenceSource Update: %v", err)
		}
		err = pgguard.RunFenced(ctx, pool, madeUp, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "UPDATE "+table+" SET amount = 1 WHERE job_id = 'k'")
			return err
		}, own)
		if err != nil {
			t.Fatalf("WithOwnFenceSource RunFenced: %v", err)
		}
		if r := readRow(t, pool, table, "k"); r.Fence != madeUp || r.Writer != "own" {
			t.Fatalf("own source: %+v", r)
		}
	})
}

// TestSetFenceNeedsOnlyUsage: a role that may draw fences (USAGE on the
// sequence, EXECUTE on the functions) and write the table can set a fence
// with the ceiling checked; reading the ceiling needs no more.
func TestSetFenceNeedsOnlyUsage(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	table := fencedAccounts(t, pool, 1, pgguard.Strict)
	role := fmt.Sprintf("pgguard_writer_%d", tableSeq.Add(1))
	for _, sql := range []string{
		"CREATE ROLE " + role + " NOLOGIN",
		"GRANT USAGE ON SEQUENCE pgfence_fence_seq TO " + role,
		"GRANT SELECT, UPDATE ON " + table + " TO " + role,
		"REVOKE SELECT ON SEQUENCE pgfence_fence_seq FROM " + role,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		pool.Exec(ctx, "REVOKE ALL ON "+table+" FROM "+role)
		pool.Exec(ctx, "REVOKE ALL ON SEQUENCE pgfence_fence_seq FROM "+role)
		pool.Exec(ctx, "DROP ROLE "+role)
	})
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+role); err != nil {
			return err
		}
		var f int64
		if err := tx.QueryRow(ctx, "SELECT pgfence_next_fence()").Scan(&f); err != nil {
			return err
		}
		if err := pgguard.SetFence(ctx, tx, f); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE "+table+" SET balance = 7 WHERE id = 1")
		return err
	})
	if err != nil {
		t.Fatalf("a role with USAGE on the sequence: %v", err)
	}
	if a := readAccount(t, pool, table, 1); a.balance != 7 {
		t.Fatalf("row: %+v", a)
	}
}

// TestTriggerCoversInheritance: InstallTrigger puts the trigger on the
// tables that inherit from the table (at any depth), so a stale write
// through the parent or straight to a child is refused; RemoveTrigger takes
// it off all of them. A child created later is not covered until
// InstallTrigger runs again (documented), and then it is.
func TestTriggerCoversInheritance(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	parent := accountsTable(t, pool, 1)
	child, grandchild, later := parent+"_child", parent+"_grandchild", parent+"_later"
	if err := addFenceColumn(ctx, pool, pgguard.Table{Name: parent}); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		"CREATE TABLE " + child + " () INHERITS (" + parent + ")",
		"CREATE TABLE " + grandchild + " () INHERITS (" + child + ")",
		"INSERT INTO " + child + " (id) VALUES (2)",
		"INSERT INTO " + grandchild + " (id) VALUES (3)",
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	if err := pgguard.InstallTrigger(ctx, pool, pgguard.Table{Name: parent}, pgguard.Strict); err != nil {
		t.Fatal(err)
	}
	f := fences(t, pool, 2)
	older, newer := f[0], f[1]
	pgtest.Step(t, "a fenced write through the parent stamps every level", func(t *testing.T) {
		// A fenced write through the parent stamps every row, the children's too.
		if err := raw(ctx, pool, newer, "UPDATE "+parent+" SET balance = 1"); err != nil {
			t.Fatal(err)
		}
		for _, tbl := range []string{parent, child, grandchild} {
			var n int
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM ONLY "+tbl+" WHERE last_fence = $1", newer).Scan(&n); err != nil || n != 1 {
				t.Fatalf("%s: %d rows stamped (%v), want 1", tbl, n, err)
			}
		}
	})

	pgtest.Step(t, "stale and unfenced writes are refused on every level", func(t *testing.T) {
		// Stale and unfenced writes are refused on every level, through the
		// parent or not.
		for _, tbl := range []string{parent, child, grandchild} {
			if err := raw(ctx, pool, older, "UPDATE "+tbl+" SET balance = 666"); !errors.Is(pgguard.Classify(err), pgguard.ErrStaleFence) {
				t.Fatalf("stale UPDATE of %s: %v", tbl, err)
			}
			if _, err := pool.Exec(ctx, "DELETE FROM ONLY "+tbl); sqlState(err) != pgerr.NoFence {
				t.Fatalf("unfenced DELETE of %s: %v", tbl, err)
			}
		}
	})

	pgtest.Step(t, "a later child is covered once InstallTrigger runs again", func(t *testing.T) {
		// A child created later is not covered, until InstallTrigger runs again.
		if _, err := pool.Exec(ctx, "CREATE TABLE "+later+" () INHERITS ("+parent+"); INSERT INTO "+later+" (id, last_fence) VALUES (4, 0)"); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, "UPDATE "+later+" SET balance = 5"); err != nil {
			t.Fatalf("the later child was covered before InstallTrigger ran again: %v", err)
		}
		if err := pgguard.InstallTrigger(ctx, pool, pgguard.Table{Name: parent}, pgguard.Strict); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, "UPDATE "+later+" SET balance = 6"); sqlState(err) != pgerr.NoFence {
			t.Fatalf("later child after InstallTrigger ran again: %v", err)
		}
	})

	pgtest.Step(t, "RemoveTrigger takes it off every level", func(t *testing.T) {
		if err := pgguard.RemoveTrigger(ctx, pool, pgguard.Table{Name: parent}); err != nil {
			t.Fatal(err)
		}
		var left int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_trigger WHERE tgname = $1 AND tgrelid::regclass::text IN ($2, $3, $4, $5)",
			"pgfence_fence_guard", parent, child, grandchild, later).Scan(&left); err != nil || left != 0 {
			t.Fatalf("triggers left after RemoveTrigger: %d (%v)", left, err)
		}
	})
}

// TestStaleRefusalsAreCounted: every stale write the trigger refuses bumps
// the sequence pgfence_stale_refusals, which pgfence serve exports; the
// count survives the refused transaction's rollback.
func TestStaleRefusalsAreCounted(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	table := fencedAccounts(t, pool, 1, pgguard.Strict)
	var older, newer int64
	if err := pool.QueryRow(ctx, "SELECT pgfence_next_fence(), pgfence_next_fence()").Scan(&older, &newer); err != nil {
		t.Fatal(err)
	}
	write := func(fence int64) error {
		return pgguard.RunFenced(ctx, pool, fence, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "UPDATE "+table+" SET balance = balance + 1 WHERE id = 1")
			return err
		})
	}
	count := func() int64 {
		var n int64
		if err := pool.QueryRow(ctx, "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM pgfence_stale_refusals").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := write(newer); err != nil {
		t.Fatal(err)
	}
	before := count()
	for i := 0; i < 2; i++ {
		if err := write(older); !errors.Is(err, pgguard.ErrStaleFence) {
			t.Fatalf("stale write: %v, want ErrStaleFence", err)
		}
	}
	if got := count() - before; got != 2 {
		t.Fatalf("the counter rose by %d after two refused stale writes, want 2", got)
	}
}
