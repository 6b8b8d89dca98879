package advisory_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/advisory"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// BenchmarkTryDo: one TryDo whose function runs one statement, on one key,
// one caller at a time.
func BenchmarkTryDo(b *testing.B) {
	pool := pgtest.Pool(b)
	ctx := context.Background()
	k := advisory.Int64Key(4242_4242)
	for b.Loop() {
		err := advisory.TryDo(ctx, pool, k, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT 1`)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}
