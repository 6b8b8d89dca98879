package payouts_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

func TestMain(m *testing.M) { pgtest.MainWithURL(m) }

// fences draws n increasing fences from the never-repeating source.
func fences(t testing.TB, pool *pgxpool.Pool, n int) []int64 {
	t.Helper()
	out := make([]int64, n)
	for i := range out {
		if err := pool.QueryRow(context.Background(), "SELECT pgfence_next_fence()").Scan(&out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}
