package pgdb_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/internal/pgdb"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// On a pool of one connection, each kind of statement gives the connection
// back (else the next one would wait for ever), and a statement that finds
// no connection fails with an error Is reports, within its context.
func TestWrap(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t, func(cfg *pgxpool.Config) { cfg.MaxConns = 1 })
	db := pgdb.Wrap(pool, "")
	within := func(t *testing.T, what string, f func(ctx context.Context) error) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := f(cctx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	for range 3 {
		within(t, "QueryRow", func(ctx context.Context) error {
			var n int
			return db.QueryRow(ctx, "SELECT 1").Scan(&n)
		})
		within(t, "Query read to the end", func(ctx context.Context) error {
			rows, err := db.Query(ctx, "SELECT generate_series(1, 3)")
			if err != nil {
				return err
			}
			for rows.Next() {
			}
			return rows.Err()
		})
		within(t, "Query closed early", func(ctx context.Context) error {
			rows, err := db.Query(ctx, "SELECT generate_series(1, 3)")
			if err != nil {
				return err
			}
			rows.Close()
			return nil
		})
		within(t, "Exec", func(ctx context.Context) error {
			_, err := db.Exec(ctx, "SELECT 1")
			return err
		})
		within(t, "a failing QueryRow", func(ctx context.Context) error {
			var n int
			if err := db.QueryRow(ctx, "SELECT 1/0").Scan(&n); err == nil || pgdb.NotSent(err) {
				return errors.New("division by zero: want a server error, not a not-sent one")
			}
			return nil
		})
	}

	held, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	var n int
	err = db.QueryRow(cctx, "SELECT 1").Scan(&n)
	if !pgdb.NotSent(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("no connection to take: %v, want a not-sent error wrapping the deadline", err)
	}
	if _, err := db.Exec(cctx, "SELECT 1"); !pgdb.NotSent(err) {
		t.Fatalf("Exec with no connection: %v", err)
	}
	if _, err := db.Query(cctx, "SELECT 1"); !pgdb.NotSent(err) {
		t.Fatalf("Query with no connection: %v", err)
	}
}
