package pgguard_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pgguard"
)

// TestBadInput: fences <= 0, unknown tables and columns, and identifiers
// built to inject SQL are refused with pgfence.ErrInvalidInput, and nothing is
// written: the table, its row and its fence are untouched.
func TestBadInput(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	table := newTable(t, pool)
	insertRow(t, pool, table, "k")
	if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS bystander; CREATE TABLE bystander (x int)"); err != nil {
		t.Fatal(err)
	}
	good := pgguard.Table{Name: table, KeyColumn: "job_id"}
	g, err := pgguard.NewGuard(ctx, pool, good)
	if err != nil {
		t.Fatal(err)
	}
	f := fences(t, pool, 1)[0]
	unchanged := func(t *testing.T) {
		t.Helper()
		if r := readRow(t, pool, table, "k"); r.Status != "PENDING" || r.Writer != "" || r.Fence != 0 || r.Amount != nil {
			t.Fatalf("bad input changed the row: %+v", r)
		}
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM bystander").Scan(&n); err != nil {
			t.Fatalf("bystander table: %v", err)
		}
		if m, ok, _ := pgguard.TriggerEnforcement(ctx, pool, pgguard.Table{Name: table}); ok {
			t.Fatalf("a trigger appeared: %v", m)
		}
	}
	invalid := func(t *testing.T, what string, err error, wantInMsg string) {
		t.Helper()
		if !errors.Is(err, pgfence.ErrInvalidInput) {
			t.Errorf("%s: got %v, want pgfence.ErrInvalidInput", what, err)
		} else if !strings.Contains(err.Error(), wantInMsg) {
			t.Errorf("%s: message %q does not say %q", what, err, wantInMsg)
		}
		unchanged(t)
	}

	evil := []struct{ name, says string }{
		{`jobs"; DROP TABLE bystander; --`, `'"'`},
		{`jobs; DROP TABLE bystander`, `';'`},
		{`jobs--`, `"--"`},
		{`jobs/*x*/`, `"/*"`},
		{`jobs*/`, `"*/"`},
		{`o'reilly`, `'\''`},
		{"tab\tle", `'\t'`},
		{"back\\slash", `'\\'`},
		{"nul\x00byte", `'\x00'`},
		{" leading", "leading or trailing space"},
		{"", "is empty"},
		{strings.Repeat("x", 64), "at most 63"},
		{"\xff\xfe", "not valid UTF-8"},
	}
	for _, e := range evil {
		t.Run("ident "+e.name, func(t *testing.T) {
			for i, tbl := range []pgguard.Table{
				{Name: e.name, KeyColumn: "job_id"},
				{Schema: e.name, Name: table, KeyColumn: "job_id"},
				{Name: table, KeyColumn: e.name},
				{Name: table, KeyColumn: "job_id", FenceColumn: e.name},
			} {
				if e.name == "" && (i == 1 || i == 3) {
					continue // an empty schema or fence column means the default
				}
				_, err := pgguard.NewGuard(ctx, pool, tbl)
				invalid(t, "NewGuard", err, e.says)
				if i == 2 {
					continue // only NewGuard uses the key column
				}
				invalid(t, "InstallTrigger", pgguard.InstallTrigger(ctx, pool, tbl, pgguard.Strict), e.says)
				_, _, err = pgguard.FenceColumnMigration(tbl)
				invalid(t, "FenceColumnMigration", err, e.says)
				_, _, err = pgguard.TriggerMigration(tbl, pgguard.Lenient)
				invalid(t, "TriggerMigration", err, e.says)
			}
			if e.name == "" {
				return
			}
			invalid(t, "Update column", g.Update(ctx, pool, "k", f, pgguard.Values{e.name: 1}), e.says)
			invalid(t, "Update condition", g.Update(ctx, pool, "k", f, pgguard.Values{"writer": "x"}, pgguard.Eq(e.name, 1)), e.says)
			invalid(t, "ClaimFirst column", g.ClaimFirst(ctx, pool, "k", f, []string{e.name}, new(string)), e.says)
		})
	}

	t.Run("catalog", func(t *testing.T) {
		for _, c := range []struct {
			tbl  pgguard.Table
			says string
		}{
			{pgguard.Table{Name: "no_such_table", KeyColumn: "job_id"}, "does not exist"},
			{pgguard.Table{Name: strings.ToUpper(table), KeyColumn: "job_id"}, "does not exist"},
			{pgguard.Table{Schema: "no_such_schema", Name: table, KeyColumn: "job_id"}, "does not exist"},
			{pgguard.Table{Name: table, KeyColumn: "no_such_column"}, `key column "no_such_column" does not exist`},
			{pgguard.Table{Name: table, KeyColumn: "job_id", FenceColumn: "no_such_column"}, `fence column "no_such_column" does not exist`},
			{pgguard.Table{Name: table, KeyColumn: "job_id", FenceColumn: "status"}, "must be bigint NOT NULL"},
			{pgguard.Table{Name: table, KeyColumn: "writer"}, "no unique index"},
			{pgguard.Table{Name: table, KeyColumn: "last_fence"}, "both"},
			{pgguard.Table{Name: "pg_class", KeyColumn: "oid"}, "does not exist"},
		} {
			_, err := pgguard.NewGuard(ctx, pool, c.tbl)
			invalid(t, "NewGuard "+c.tbl.Schema+"."+c.tbl.Name+"."+c.tbl.KeyColumn+"."+c.tbl.FenceColumn, err, c.says)
		}
		if _, err := pool.Exec(ctx, "CREATE VIEW "+table+"_v AS SELECT * FROM "+table); err != nil {
			t.Fatal(err)
		}
		_, err := pgguard.NewGuard(ctx, pool, pgguard.Table{Name: table + "_v", KeyColumn: "job_id"})
		invalid(t, "a view", err, "is not a table")
		invalid(t, "InstallTrigger on a text fence column", pgguard.InstallTrigger(ctx, pool, pgguard.Table{Name: table, FenceColumn: "status"}, pgguard.Strict), "must be bigint NOT NULL")
		invalid(t, "InstallTrigger without a fence column", pgguard.InstallTrigger(ctx, pool, pgguard.Table{Name: "bystander"}, pgguard.Strict), `fence column "last_fence" does not exist`)
		invalid(t, "InstallTrigger without a mode", pgguard.InstallTrigger(ctx, pool, pgguard.Table{Name: table}, ""), "Strict or Lenient")
		invalid(t, "Update unknown column", g.Update(ctx, pool, "k", f, pgguard.Values{"nope": 1}), `column "nope" does not exist`)
		invalid(t, "Update condition on unknown column", g.Update(ctx, pool, "k", f, nil, pgguard.Eq("nope", 1)), `does not exist`)
		invalid(t, "ClaimFirst unknown column", g.ClaimFirst(ctx, pool, "k", f, []string{"nope"}, new(string)), `does not exist`)
	})

	t.Run("values", func(t *testing.T) {
		for _, bad := range []int64{0, -1, -1 << 63} {
			invalid(t, "Update fence", g.Update(ctx, pool, "k", bad, pgguard.Values{"writer": "x"}), "fence must be positive")
			invalid(t, "ClaimFirst fence", g.ClaimFirst(ctx, pool, "k", bad, nil), "fence must be positive")
			invalid(t, "Check fence", g.Check(ctx, pool, "k", bad), "fence must be positive")
			invalid(t, "RunFenced fence", pgguard.RunFenced(ctx, pool, bad, func(pgx.Tx) error { return nil }), "fence must be positive")
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return pgguard.SetFence(ctx, tx, bad) })
			invalid(t, "SetFence", err, "fence must be positive")
		}
		invalid(t, "nil key", g.Update(ctx, pool, nil, f, pgguard.Values{"writer": "x"}), "nil key")
		invalid(t, "set the key", g.Update(ctx, pool, "k", f, pgguard.Values{"job_id": "j2"}), "key column")
		invalid(t, "set the fence", g.Update(ctx, pool, "k", f, pgguard.Values{"last_fence": 1 << 62}), "fence column")
		invalid(t, "empty In", g.Update(ctx, pool, "k", f, nil, pgguard.In("status")), "at least one")
		invalid(t, "nil in In", g.Update(ctx, pool, "k", f, nil, pgguard.In("status", nil)), "IsNull")
		invalid(t, "zero Cond", g.Update(ctx, pool, "k", f, nil, pgguard.Cond{}), "zero Cond")
		invalid(t, "ClaimFirst arity", g.ClaimFirst(ctx, pool, "k", f, []string{"status"}), "1 columns and 0 destinations")
		invalid(t, "nil stale hook", func() error { _, err := pgguard.NewGuard(ctx, pool, good, pgguard.WithStaleHook(nil)); return err }(), "nil stale hook")
		invalid(t, "zero option", func() error { _, err := pgguard.NewGuard(ctx, pool, good, pgguard.Option{}); return err }(), "zero option")
		invalid(t, "zero RunFenced option", pgguard.RunFenced(ctx, pool, f, func(pgx.Tx) error { return nil }, pgguard.Option{}), "zero option")
	})

	t.Run("values are bound", func(t *testing.T) {
		// Injection through values goes nowhere: they are parameters.
		err := g.Update(ctx, pool, "k' OR '1'='1", f, pgguard.Values{"writer": "x"})
		if !errors.Is(err, pgfence.ErrNotFound) {
			t.Fatalf("key injection: %v", err)
		}
		unchanged(t)
		err = g.Update(ctx, pool, "k", f, pgguard.Values{"writer": "x"}, pgguard.Eq("status", "x' OR 'a'='a"))
		if !errors.Is(err, pgguard.ErrPrecondition) {
			t.Fatalf("condition injection: %v", err)
		}
		unchanged(t)
		payload := "'); DROP TABLE bystander; --"
		if err := g.Update(ctx, pool, "k", f, pgguard.Values{"writer": payload}); err != nil {
			t.Fatal(err)
		}
		if r := readRow(t, pool, table, "k"); r.Writer != payload {
			t.Fatalf("value stored as %q", r.Writer)
		}
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM bystander").Scan(&n); err != nil {
			t.Fatalf("bystander table: %v", err)
		}
	})
}

// TestOptionsPerFunction: each function takes only the options that apply
// to it, and refuses the others by name instead of ignoring them.
func TestOptionsPerFunction(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	table := newTable(t, pool)
	good := pgguard.Table{Name: table, KeyColumn: "job_id"}
	f := fences(t, pool, 1)[0]
	calls := map[string]func(pgguard.Option) error{
		"NewGuard": func(o pgguard.Option) error { _, err := pgguard.NewGuard(ctx, pool, good, o); return err },
		"RunFenced": func(o pgguard.Option) error {
			return pgguard.RunFenced(ctx, pool, f, func(pgx.Tx) error { return nil }, o)
		},
		"SetFence": func(o pgguard.Option) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return pgguard.SetFence(ctx, tx, f, o) })
		},
		"TriggerMigration": func(o pgguard.Option) error {
			_, _, err := pgguard.TriggerMigration(good, pgguard.Strict, o)
			return err
		},
	}
	takes := map[string]struct {
		opt  pgguard.Option
		want []string
	}{
		"WithStaleHook":      {pgguard.WithStaleHook(func(context.Context, *pgguard.StaleFenceError) {}), []string{"NewGuard", "RunFenced"}},
		"WithMeterProvider":  {pgguard.WithMeterProvider(noop.NewMeterProvider()), []string{"NewGuard", "RunFenced"}},
		"WithDoneWhen":       {pgguard.WithDoneWhen(pgguard.Eq("status", "SENT")), []string{"NewGuard"}},
		"WithOwnFenceSource": {pgguard.WithOwnFenceSource(), []string{"NewGuard", "RunFenced", "SetFence"}},
		"WithSchema":         {pgguard.WithSchema("public"), []string{"NewGuard", "RunFenced", "SetFence", "TriggerMigration"}},
	}
	for name, tc := range takes {
		for fn, call := range calls {
			want := slices.Contains(tc.want, fn)
			err := call(tc.opt)
			switch {
			case want && err != nil:
				t.Errorf("%s refused by %s: %v", name, fn, err)
			case !want && (!errors.Is(err, pgfence.ErrInvalidInput) || !strings.Contains(err.Error(), name+" does not apply to")):
				t.Errorf("%s given to %s: %v, want pgfence.ErrInvalidInput naming the option", name, fn, err)
			}
		}
	}
}
