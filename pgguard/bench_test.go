package pgguard_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pgguard"
)

// BenchmarkUpdate compares one guarded single-row write with the same write
// hand-written, with and without the fencing trigger on the table.
func BenchmarkUpdate(b *testing.B) {
	ctx := context.Background()
	pool := pgtest.Pool(b)
	for _, trigger := range []bool{false, true} {
		table := newTable(b, pool)
		insertRow(b, pool, table, "k")
		if trigger {
			if err := pgguard.InstallTrigger(ctx, pool, pgguard.Table{Name: table}, pgguard.Strict); err != nil {
				b.Fatal(err)
			}
		}
		g, err := pgguard.NewGuard(ctx, pool, pgguard.Table{Name: table, KeyColumn: "job_id"})
		if err != nil {
			b.Fatal(err)
		}
		f := fences(b, pool, 1)[0]
		b.Run(fmt.Sprintf("guard/trigger=%v", trigger), func(b *testing.B) {
			for b.Loop() {
				if err := g.Update(ctx, pool, "k", f, pgguard.Values{"writer": "x"}, pgguard.Eq("status", "PENDING")); err != nil {
					b.Fatal(err)
				}
			}
		})
		sql := "UPDATE " + table + " SET writer = $1, last_fence = $2 FROM (SELECT pgfence_set_fence($2::bigint)) s WHERE job_id = $3 AND last_fence <= $2 AND status = 'PENDING'"
		b.Run(fmt.Sprintf("handwritten/trigger=%v", trigger), func(b *testing.B) {
			for b.Loop() {
				if _, err := pool.Exec(ctx, sql, "x", f, "k"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBulkUpdate measures the trigger's cost per row: one fenced UPDATE
// of 10,000 rows per operation.
func BenchmarkBulkUpdate(b *testing.B) {
	ctx := context.Background()
	pool := pgtest.Pool(b)
	for _, trigger := range []bool{false, true} {
		table := newTable(b, pool)
		if _, err := pool.Exec(ctx, "INSERT INTO "+table+" (job_id) SELECT 'k' || g FROM generate_series(1, 10000) g"); err != nil {
			b.Fatal(err)
		}
		if trigger {
			if err := pgguard.InstallTrigger(ctx, pool, pgguard.Table{Name: table}, pgguard.Strict); err != nil {
				b.Fatal(err)
			}
		}
		f := fences(b, pool, 1)[0]
		b.Run(fmt.Sprintf("trigger=%v", trigger), func(b *testing.B) {
			for b.Loop() {
				err := pgguard.RunFenced(ctx, pool, f, func(tx pgx.Tx) error {
					_, err := tx.Exec(ctx, "UPDATE "+table+" SET amount = coalesce(amount, 0) + 1")
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
