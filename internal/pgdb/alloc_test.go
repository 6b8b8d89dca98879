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

// nopDB and asDBTX are variables, so that calls on them are not
// devirtualized.
var (
	nopDB  DBTX = nop{}
	asDBTX DBTX
)

// The wrapper is on every statement's path: through a DB, stored or built
// for the call (a db passed per call), in Mode or in the db's own, a
// statement costs one allocation, its arguments (with Mode in front); the
// caller's variadic arguments do not escape. Through a DB held as a DBTX
// they do, one more.
func TestAllocationsPerStatement(t *testing.T) {
	ctx, db := context.Background(), nopDB
	stored, own := Wrap(db, ""), WrapOwnMode(db, "")
	asDBTX = stored
	for _, c := range []struct {
		name string
		want float64
		f    func()
	}{
		{"stored Exec", 1, func() { stored.Exec(ctx, "SELECT $1, $2", 1, 2) }},
		{"stored Query", 1, func() { stored.Query(ctx, "SELECT $1, $2", 1, 2) }},
		{"stored QueryRow", 1, func() { stored.QueryRow(ctx, "SELECT $1, $2", 1, 2) }},
		{"own mode", 1, func() { own.Exec(ctx, "SELECT $1, $2", 1, 2) }},
		{"per-call Exec", 1, func() { Wrap(db, "").Exec(ctx, "SELECT $1, $2", 1, 2) }},
		{"per-call Query", 1, func() { Wrap(db, "").Query(ctx, "SELECT $1, $2", 1, 2) }},
		{"as a DBTX", 2, func() { asDBTX.Exec(ctx, "SELECT $1, $2", 1, 2) }},
	} {
		if got := testing.AllocsPerRun(100, c.f); got != c.want {
			t.Errorf("%s: %v allocations per statement, want %v", c.name, got, c.want)
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
