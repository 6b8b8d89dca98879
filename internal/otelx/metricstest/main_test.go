package metricstest_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// TestMain gives the package a fresh, migrated database and checks for
// leaked goroutines (pgtest.Main).
func TestMain(m *testing.M) { pgtest.Main(m) }

func newClient(t *testing.T, pool *pgxpool.Pool, opts ...pglease.Option) *pglease.Client {
	t.Helper()
	c, err := pglease.New(pool, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func uniqueKey(t *testing.T) string {
	return fmt.Sprintf("%s:%d", t.Name(), rand.Int64())
}

var seq atomic.Int64

// queue names a queue of the test's own, so that reruns (-count) in the same
// database never see an earlier run's jobs.
func queue(name string) string { return fmt.Sprintf("%s-%d-%d", name, os.Getpid(), seq.Add(1)) }

func newClaimer(t *testing.T, pool *pgxpool.Pool, queue string, opts ...claim.Option) *claim.Claimer {
	t.Helper()
	c, err := claim.New(context.Background(), pool, append([]claim.Option{claim.WithQueue(queue), claim.WithOwner("test/" + queue)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	// A Claimer's gauges end when it is garbage collected (it has no
	// Close); keep it reachable until the test ends, or a collection
	// after its last use would read as a missing point (CI saw it).
	t.Cleanup(func() { runtime.KeepAlive(c) })
	return c
}

func enqueue(t *testing.T, pool *pgxpool.Pool, j claim.NewJob) int64 {
	t.Helper()
	c, err := claim.New(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.Enqueue(context.Background(), pool, j)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// expire makes a job's lease end now, as if its worker had stalled past it.
func expire(t *testing.T, pool *pgxpool.Pool, id int64) {
	t.Helper()
	if _, err := pool.Exec(context.Background(),
		`UPDATE pgfence_jobs SET expires_at = now() - interval '1 millisecond' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
}

// newTable creates a guarded table (job_id text PRIMARY KEY, status, writer,
// last_fence) and returns its name.
func newTable(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	name := fmt.Sprintf("metrics_%d_%d", os.Getpid(), seq.Add(1))
	_, err := pool.Exec(context.Background(), fmt.Sprintf(`CREATE TABLE %s (
  job_id     text PRIMARY KEY,
  status     text NOT NULL DEFAULT 'PENDING',
  writer     text NOT NULL DEFAULT '',
  last_fence bigint NOT NULL DEFAULT 0
)`, name))
	if err != nil {
		t.Fatal(err)
	}
	return name
}

func insertRow(t *testing.T, pool *pgxpool.Pool, table, key string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), fmt.Sprintf("INSERT INTO %s (job_id) VALUES ($1)", table), key); err != nil {
		t.Fatal(err)
	}
}

// fences draws n increasing fences from the never-repeating source.
func fences(t *testing.T, pool *pgxpool.Pool, n int) []int64 {
	t.Helper()
	out := make([]int64, n)
	for i := range out {
		if err := pool.QueryRow(context.Background(), "SELECT pgfence_next_fence()").Scan(&out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// eventually polls cond (a state whose timing the test does not control).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
