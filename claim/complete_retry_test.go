package claim_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// A retried completion (same id + fence, after a lost answer) that queues
// behind the first attempt's row lock must succeed once the first commits:
// the job is completed under its fence. The retry's statement snapshot,
// taken before it waited, still shows the row running, so the statement
// alone answers "not completed"; the claimer reads the row back after the
// wait. Checked for Complete and for CompleteTx as the retry.
func TestCompleteRetryBehindFirstAttemptsLockSucceeds(t *testing.T) {
	for _, inTx := range []bool{false, true} {
		name := "Complete"
		if inTx {
			name = "CompleteTx"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			pool := pgtest.Pool(t)
			qn := queue("retrylock")
			c := newClaimer(t, pool, qn)
			id := enqueue(t, pool, claim.NewJob{Queue: qn})
			j := claimOne(t, c, time.Minute)

			// The first attempt: its transaction holds the job row.
			first, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer first.Rollback(ctx)
			var firstPID int32
			if err := first.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&firstPID); err != nil {
				t.Fatal(err)
			}
			if _, err := first.Exec(ctx, `SELECT 1 FROM pgfence_jobs WHERE id = $1 FOR UPDATE`, id); err != nil {
				t.Fatal(err)
			}

			// The retry, waiting for the first attempt's row lock.
			retried := make(chan error, 1)
			go func() {
				if !inTx {
					retried <- c.Complete(ctx, j)
					return
				}
				retried <- pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return c.CompleteTx(ctx, tx, j) })
			}()
			deadline := time.Now().Add(10 * time.Second)
			for {
				var waiting int
				if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY (pg_blocking_pids(pid))`, firstPID).Scan(&waiting); err != nil {
					t.Fatal(err)
				}
				if waiting == 1 {
					break
				}
				select {
				case err := <-retried:
					t.Fatalf("the retry did not wait for the first attempt's lock: %v", err)
				default:
				}
				if time.Now().After(deadline) {
					t.Fatal("the retry never waited for the first attempt's lock")
				}
				time.Sleep(10 * time.Millisecond)
			}

			// The first attempt completes and commits.
			if err := c.CompleteTx(ctx, first, j); err != nil {
				t.Fatal(err)
			}
			if err := first.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-retried:
				if err != nil {
					t.Fatalf("the retry of a completion that counted: %v, want success", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the retry did not return")
			}
			if row := getJob(t, pool, id); row.state != "completed" || row.fence == nil || *row.fence != j.Fence {
				t.Fatalf("job %+v, want completed under fence %d", row, j.Fence)
			}
		})
	}
}
