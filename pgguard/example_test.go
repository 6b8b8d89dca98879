package pgguard_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/pgguard"
	"github.com/pgfence/pgfence/pglease"
)

// openWithInvoiceJobs opens your pool (DATABASE_URL, a database where
// pgfence's migrations ran) and creates the examples' invoice_jobs table
// afresh.
func openWithInvoiceJobs(ctx context.Context) *pgxpool.Pool {
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	_, err = pool.Exec(ctx, `
DROP TABLE IF EXISTS invoice_jobs;
CREATE TABLE invoice_jobs (job_id text PRIMARY KEY, status text NOT NULL DEFAULT 'PENDING');
INSERT INTO invoice_jobs (job_id) VALUES ('inv_72');`)
	if err != nil {
		log.Fatal(err)
	}
	return pool
}

// addFenceColumn gives t its fence column, as Example shows: the up SQL of
// FenceColumnMigration, applied on db.
func addFenceColumn(ctx context.Context, db pgfence.DBTX, t pgguard.Table) error {
	up, _, err := pgguard.FenceColumnMigration(t)
	if err != nil {
		return err
	}
	_, err = db.Exec(ctx, up)
	return err
}

// The stale-writer timeline: A's lease expires while it
// is paused, B takes the lease and writes, and A's late write is refused by
// the row.
func Example() {
	ctx := context.Background()
	pool := openWithInvoiceJobs(ctx)
	defer pool.Close()

	// Once: give the table its fence column (here applied directly; a
	// migration file of yours would hold the same SQL).
	up, _, err := pgguard.FenceColumnMigration(pgguard.Table{Name: "invoice_jobs"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, up); err != nil {
		log.Fatal(err)
	}
	jobs, err := pgguard.NewGuard(ctx, pool, pgguard.Table{Name: "invoice_jobs", KeyColumn: "job_id"})
	if err != nil {
		log.Fatal(err)
	}

	workerA, err := pglease.New(pool, pglease.WithoutAutoRenew())
	if err != nil {
		log.Fatal(err)
	}
	defer workerA.Close()
	workerB, err := pglease.New(pool)
	if err != nil {
		log.Fatal(err)
	}
	defer workerB.Close()

	a, err := workerA.TryAcquire(ctx, "invoice:inv_72", 50*time.Millisecond)
	if err != nil {
		log.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // A pauses past its 50ms TTL: its lease expires, by the database clock.

	b, err := workerB.TryAcquire(ctx, "invoice:inv_72", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Release(ctx)
	err = jobs.Update(ctx, pool, "inv_72", b.Fence(), pgguard.Values{"status": "SENT"}, pgguard.Eq("status", "PENDING"))
	fmt.Println("B:", err)

	// A resumes and writes with its old fence.
	err = jobs.Update(ctx, pool, "inv_72", a.Fence(), pgguard.Values{"status": "SENT"}, pgguard.Eq("status", "PENDING"))
	var stale *pgguard.StaleFenceError
	if errors.As(err, &stale) {
		fmt.Println("A: stale; the row carries B's fence:", stale.Current == b.Fence())
	}

	// B repeats its transition: the fence is fine, the state is not.
	err = jobs.Update(ctx, pool, "inv_72", b.Fence(), pgguard.Values{"status": "SENT"}, pgguard.Eq("status", "PENDING"))
	fmt.Println("B again: precondition not met:", errors.Is(err, pgguard.ErrPrecondition))
	// Output:
	// B: <nil>
	// A: stale; the row carries B's fence: true
	// B again: precondition not met: true
}

// Claim first: the new holder raises the row's fence as the first statement
// of its transaction and decides from the state it inherits.
func ExampleGuard_ClaimFirst() {
	ctx := context.Background()
	pool := openWithInvoiceJobs(ctx)
	defer pool.Close()
	if err := addFenceColumn(ctx, pool, pgguard.Table{Name: "invoice_jobs"}); err != nil {
		log.Fatal(err)
	}
	jobs, err := pgguard.NewGuard(ctx, pool, pgguard.Table{Name: "invoice_jobs", KeyColumn: "job_id"})
	if err != nil {
		log.Fatal(err)
	}
	q := fencedb.New(pool)
	oldFence, err := q.NextFence(ctx) // a holder that has since lost its lease
	if err != nil {
		log.Fatal(err)
	}
	newFence, err := q.NextFence(ctx) // the new holder's
	if err != nil {
		log.Fatal(err)
	}

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var status string
		if err := jobs.ClaimFirst(ctx, tx, "inv_72", newFence, []string{"status"}, &status); err != nil {
			return err // ErrStaleFence: a newer holder exists; abandon.
		}
		fmt.Println("inherited:", status)
		if status != "PENDING" {
			return nil // already done
		}
		// ... send the invoice ...
		return jobs.Update(ctx, tx, "inv_72", newFence, pgguard.Values{"status": "SENT"}, pgguard.Eq("status", "PENDING"))
	})
	fmt.Println("claimed and sent:", err)

	// The old holder's write is refused, wherever it lands after the claim.
	err = jobs.Update(ctx, pool, "inv_72", oldFence, pgguard.Values{"status": "SENT"})
	fmt.Println("old holder:", errors.Is(err, pgguard.ErrStaleFence))
	// Output:
	// inherited: PENDING
	// claimed and sent: <nil>
	// old holder: true
}

// Database-enforced fencing: the trigger refuses a stale holder's
// hand-written UPDATE even though it forgot the fence predicate.
func ExampleInstallTrigger() {
	ctx := context.Background()
	pool := openWithInvoiceJobs(ctx)
	defer pool.Close()
	tbl := pgguard.Table{Name: "invoice_jobs"}
	if err := addFenceColumn(ctx, pool, tbl); err != nil {
		log.Fatal(err)
	}
	if err := pgguard.InstallTrigger(ctx, pool, tbl, pgguard.Strict); err != nil {
		log.Fatal(err)
	}
	q := fencedb.New(pool)
	oldFence, err := q.NextFence(ctx)
	if err != nil {
		log.Fatal(err)
	}
	newFence, err := q.NextFence(ctx)
	if err != nil {
		log.Fatal(err)
	}

	rawUpdate := func(fence int64, status string) error {
		return pgguard.RunFenced(ctx, pool, fence, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "UPDATE invoice_jobs SET status = $1 WHERE job_id = 'inv_72'", status)
			return err
		})
	}
	fmt.Println("new holder:", rawUpdate(newFence, "SENT"))
	err = rawUpdate(oldFence, "VOID")
	fmt.Println("old holder refused:", errors.Is(err, pgguard.ErrStaleFence))

	// Strict mode: a transaction that set no fence may not change the row.
	_, err = pool.Exec(ctx, "DELETE FROM invoice_jobs WHERE job_id = 'inv_72'")
	fmt.Println("no fence refused:", errors.Is(pgguard.Classify(err), pgguard.ErrNoFence))
	// Output:
	// new holder: <nil>
	// old holder refused: true
	// no fence refused: true
}
