package pgdb

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// nop is a DBTX that sends nothing.
type nop struct{}

func (nop) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, nil
}
func (nop) Query(context.Context, string, ...any) (pgx.Rows, error) { return nil, nil }
func (nop) QueryRow(context.Context, string, ...any) pgx.Row        { return nil }

// nopDB is a variable, so that calls through it are not devirtualized: a
// caller's variadic arguments then escape, as through any DBTX.
var nopDB DBTX = nop{}

// The wrapper is on every statement's path: through it, a statement costs
// one allocation (its arguments, with Mode in front) more than on the bare
// db, whether the wrapper is stored or built for the call (a db passed per
// call), in Mode or in the db's own.
func TestAllocationsPerStatement(t *testing.T) {
	ctx, db := context.Background(), nopDB
	bare := testing.AllocsPerRun(100, func() { db.Exec(ctx, "SELECT $1, $2", 1, 2) })
	stored, own := Wrap(db, ""), WrapOwnMode(db, "")
	for name, f := range map[string]func(){
		"stored Exec":     func() { stored.Exec(ctx, "SELECT $1, $2", 1, 2) },
		"stored Query":    func() { stored.Query(ctx, "SELECT $1, $2", 1, 2) },
		"stored QueryRow": func() { stored.QueryRow(ctx, "SELECT $1, $2", 1, 2) },
		"own mode":        func() { own.Exec(ctx, "SELECT $1, $2", 1, 2) },
		"per-call Exec":   func() { Wrap(db, "").Exec(ctx, "SELECT $1, $2", 1, 2) },
		"per-call Query":  func() { Wrap(db, "").Query(ctx, "SELECT $1, $2", 1, 2) },
	} {
		if got := testing.AllocsPerRun(100, f); got > bare+1 {
			t.Errorf("%s: %v allocations per statement, want at most %v", name, got, bare+1)
		}
	}
}

// With a schema, a statement's text is found with one lookup and no
// allocation.
func TestExpandAllocatesNothing(t *testing.T) {
	const sql = "SELECT FROM /* TEMPLATE: schema */lock_leases"
	if _, err := Expand(sql, "bench"); err != nil {
		t.Fatal(err)
	}
	if got := testing.AllocsPerRun(100, func() { Expand(sql, "bench") }); got != 0 {
		t.Errorf("%v allocations per cached expansion, want 0", got)
	}
}
