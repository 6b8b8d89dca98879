package migrations_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfence/pgfence/migrations"
)

// pgfence's functions and the fencing trigger work from a session whose
// search_path does not name pgfence's schema: each body
// finds its schema's objects by qualified name, and only them.
func TestFunctionsIndependentOfSearchPath(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := bareDatabase(t)
	if err := migrations.Up(ctx, base); err != nil {
		t.Fatal(err)
	}
	const s = `"Fence One"`
	if err := migrations.Up(ctx, base, migrations.WithSchema("Fence One")); err != nil {
		t.Fatal(err)
	}
	if _, err := base.Exec(ctx, `CREATE SCHEMA elsewhere;
		CREATE TABLE elsewhere.accounts (id int PRIMARY KEY, balance int NOT NULL, last_fence bigint NOT NULL DEFAULT 0);
		INSERT INTO elsewhere.accounts VALUES (1, 0);
		CREATE TRIGGER fenced BEFORE UPDATE OR DELETE ON elsewhere.accounts
		  FOR EACH ROW EXECUTE FUNCTION `+s+`.pgfence_enforce_fence('strict', 'last_fence')`); err != nil {
		t.Fatal(err)
	}
	cfg := base.Config().ConnConfig.Copy()
	cfg.RuntimeParams["search_path"] = "elsewhere"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	var f1, f2, ceiling int64
	var durable bool
	if err := conn.QueryRow(ctx, `SELECT `+s+`.pgfence_next_fence(), `+s+`.pgfence_draw_fence(), `+s+`.pgfence_fence_ceiling(), `+s+`.pgfence_commit_durably()`).Scan(&f1, &f2, &ceiling, &durable); err != nil {
		t.Fatalf("pgfence's functions from search_path elsewhere: %v", err)
	}
	if !(f1 < f2 && f2 <= ceiling) || !durable {
		t.Fatalf("fences %d, %d, ceiling %d, durable %v", f1, f2, ceiling, durable)
	}
	// So do the SQL lease functions: a grant in "Fence One"'s lease table.
	var granted int64
	if err := conn.QueryRow(ctx, `SELECT fence FROM `+s+`.pgfence_acquire('k', '1 min', 'sql')`).Scan(&granted); err != nil || granted <= f2 {
		t.Fatalf("pgfence_acquire from search_path elsewhere: fence %d after %d, %v", granted, f2, err)
	}
	var released bool
	if err := conn.QueryRow(ctx, `SELECT released FROM `+s+`.pgfence_release('k', $1)`, granted).Scan(&released); err != nil || !released {
		t.Fatalf("pgfence_release from search_path elsewhere: %v %v", released, err)
	}
	// The fences came from "Fence One"'s sequence; the default layout's is untouched.
	var oneCalled, defCalled bool
	if err := conn.QueryRow(ctx, `SELECT (SELECT is_called FROM `+s+`.pgfence_fence_seq), (SELECT is_called FROM public.pgfence_fence_seq)`).Scan(&oneCalled, &defCalled); err != nil {
		t.Fatal(err)
	}
	if !oneCalled || defCalled {
		t.Fatalf("sequences used: Fence One %v, public %v; want only Fence One's", oneCalled, defCalled)
	}
	// The default layout's functions are qualified too (with public, the
	// schema its migrations ran in).
	var fd int64
	if err := conn.QueryRow(ctx, `SELECT public.pgfence_next_fence()`).Scan(&fd); err != nil || fd <= 0 {
		t.Fatalf("public.pgfence_next_fence() from search_path elsewhere = %d, %v", fd, err)
	}

	write := func(fence int64) error {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `SELECT `+s+`.pgfence_set_fence($1)`, fence); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance + 1 WHERE id = 1`); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	if err := write(f2); err != nil {
		t.Fatalf("fenced write: %v", err)
	}
	var pe *pgconn.PgError
	if err := write(f1); !errors.As(err, &pe) || pe.Code != "PF001" {
		t.Fatalf("stale write: %v, want PF001", err)
	}
	if _, err := conn.Exec(ctx, `UPDATE accounts SET balance = 0`); !errors.As(err, &pe) || pe.Code != "PF002" {
		t.Fatalf("unfenced write: %v, want PF002", err)
	}
	var counted bool
	if err := conn.QueryRow(ctx, `SELECT is_called FROM `+s+`.pgfence_stale_refusals`).Scan(&counted); err != nil || !counted {
		t.Fatalf("the stale refusal was not counted in Fence One: %v %v", counted, err)
	}
	if err := conn.QueryRow(ctx, `SELECT `+s+`.pgfence_set_fence($1)`, ceiling+1_000_000).Scan(new(int64)); !errors.As(err, &pe) || pe.Code != "PF004" {
		t.Fatalf("fence above the ceiling: %v, want PF004", err)
	}

	// pgfence_draw_fence stays inlined (why it is a SQL function): the
	// plan shows its body, not a call.
	var plan strings.Builder
	rows, err := conn.Query(ctx, `EXPLAIN (VERBOSE) SELECT `+s+`.pgfence_draw_fence()`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plan.String(), "pgfence_draw_fence") || !strings.Contains(plan.String(), "nextval") {
		t.Fatalf("pgfence_draw_fence is not inlined:\n%s", plan.String())
	}
}
