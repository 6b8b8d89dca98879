package pgguard_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

func TestMain(m *testing.M) {
	// The timeline test re-executes this binary as a worker process; a
	// worker talks to the parent's database and runs no tests.
	if os.Getenv(workerEnv) != "" {
		os.Exit(workerMain())
	}
	pgtest.MainWithURL(m)
}

var tableSeq atomic.Int64

// newTable creates a fresh table of the shape the examples use:
//
//	(job_id text PRIMARY KEY, status text, writer text, amount int, last_fence bigint NOT NULL DEFAULT 0)
//
// and returns its name.
func newTable(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	name := fmt.Sprintf("jobs_%d_%d", os.Getpid(), tableSeq.Add(1))
	_, err := pool.Exec(context.Background(), fmt.Sprintf(`CREATE TABLE %s (
  job_id     text PRIMARY KEY,
  status     text NOT NULL DEFAULT 'PENDING',
  writer     text NOT NULL DEFAULT '',
  amount     integer,
  last_fence bigint NOT NULL DEFAULT 0
)`, name))
	if err != nil {
		t.Fatal(err)
	}
	return name
}

func insertRow(t testing.TB, pool *pgxpool.Pool, table, key string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), fmt.Sprintf("INSERT INTO %s (job_id) VALUES ($1)", table), key); err != nil {
		t.Fatal(err)
	}
}

type rowState struct {
	Status, Writer string
	Amount         *int32
	Fence          int64
}

func readRow(t testing.TB, pool *pgxpool.Pool, table, key string) rowState {
	t.Helper()
	var r rowState
	err := pool.QueryRow(context.Background(), fmt.Sprintf("SELECT status, writer, amount, last_fence FROM %s WHERE job_id = $1", table), key).
		Scan(&r.Status, &r.Writer, &r.Amount, &r.Fence)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

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
