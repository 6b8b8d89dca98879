package pgdb_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/internal/pgdb"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// On a pool, taking the connection itself costs a statement no allocation
// more than the pool's own QueryRow, Query and Exec with Mode put in front
// of the arguments in a new slice, as every statement was sent before the
// wrapper took the connection (pgxpool cuts its rows from slabs, as the
// wrapper does).
func TestPoolStatementAllocations(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	var n int
	check := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	drain := func(rows pgx.Rows, err error) {
		check(err)
		for rows.Next() {
		}
		check(rows.Err())
	}
	mode := func(args ...any) []any { return append([]any{pgdb.Mode}, args...) }
	w := pgdb.Wrap(pool, "")
	for _, c := range []struct {
		name       string
		bare, wrap func()
	}{
		{"QueryRow",
			func() { check(pool.QueryRow(ctx, "SELECT $1::int", mode(1)...).Scan(&n)) },
			func() { check(w.QueryRow(ctx, "SELECT $1::int", 1).Scan(&n)) }},
		{"Query",
			func() { drain(pool.Query(ctx, "SELECT $1::int", mode(1)...)) },
			func() { drain(w.Query(ctx, "SELECT $1::int", 1)) }},
		{"Exec",
			func() { _, err := pool.Exec(ctx, "SELECT $1::int", mode(1)...); check(err) },
			func() { _, err := w.Exec(ctx, "SELECT $1::int", 1); check(err) }},
	} {
		c.bare() // the connection's first statement describes it: not measured
		c.wrap()
		bare := testing.AllocsPerRun(200, c.bare)
		wrapped := testing.AllocsPerRun(200, c.wrap)
		if wrapped > bare {
			t.Errorf("%s: %v allocations through the wrapper, %v on the bare pool", c.name, wrapped, bare)
		}
	}
}
