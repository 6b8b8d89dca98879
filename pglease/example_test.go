package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/pglease"
)

// Skip when another instance holds the key: the right reaction for
// scheduled work. The fence travels with every protected write.
func ExampleClient_TryAcquire() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS invoice_jobs (
		job_id text PRIMARY KEY, status text NOT NULL, last_fence bigint NOT NULL DEFAULT 0);
		INSERT INTO invoice_jobs VALUES ('inv_72', 'PENDING', 0) ON CONFLICT DO NOTHING`); err != nil {
		log.Fatal(err)
	}

	leases, err := pglease.New(pool)
	if err != nil {
		log.Fatal(err)
	}
	defer leases.Close()
	lease, err := leases.TryAcquire(ctx, "invoice:inv_72", 30*time.Second)
	if errors.Is(err, pgfence.ErrNotAcquired) {
		fmt.Println("another instance is sending it")
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	// A second instance is refused while the lease is held.
	other, err := pglease.New(pool)
	if err != nil {
		log.Fatal(err)
	}
	defer other.Close()
	_, err = other.TryAcquire(ctx, "invoice:inv_72", 30*time.Second)
	fmt.Println("second instance refused:", errors.Is(err, pgfence.ErrNotAcquired))

	// The resource checks the fence in the same statement as the write.
	tag, err := pool.Exec(ctx, `UPDATE invoice_jobs SET status = 'SENT', last_fence = $1
		WHERE job_id = 'inv_72' AND last_fence <= $1 AND status = 'PENDING'`, lease.Fence())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("rows sent:", tag.RowsAffected())
	// Output:
	// second instance refused: true
	// rows sent: 1
}

// Do waits for the lease, runs the function while renewing it, and releases
// it. The function's context ends if the lease is lost.
func ExampleClient_Do() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	leases, err := pglease.New(pool, pglease.WithMaxWait(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer leases.Close()

	err = leases.Do(ctx, "export:nightly", time.Minute, func(ctx context.Context, l *pglease.Lease) error {
		fmt.Println("exporting under", l.Key())
		return ctx.Err() // a real export checks ctx between steps
	})
	fmt.Println("err:", err)
	// Output:
	// exporting under export:nightly
	// err: <nil>
}

// Campaign elects a leader; the fence is the leader's epoch.
func ExampleClient_Campaign() {
	ctx, cancel := context.WithCancel(context.Background())
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	leases, err := pglease.New(pool)
	if err != nil {
		log.Fatal(err)
	}
	defer leases.Close()

	err = leases.Campaign(ctx, "leader:scheduler", 15*time.Second, func(ctx context.Context, term *pglease.Lease) error {
		fmt.Println("leading with an epoch:", term.Fence() > 0)
		cancel() // a real leader works until ctx ends
		return nil
	})
	fmt.Println(errors.Is(err, context.Canceled))
	// Output:
	// leading with an epoch: true
	// true
}

// Acquire waits for a held key, up to the client's maximum wait. A caller
// that gives up learns how long it waited.
func ExampleClient_Acquire() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	holder, err := pglease.New(pool)
	if err != nil {
		log.Fatal(err)
	}
	defer holder.Close()
	waiter, err := pglease.New(pool, pglease.WithMaxWait(300*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer waiter.Close()

	held, err := holder.TryAcquire(ctx, "cache:rebuild", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	_, err = waiter.Acquire(ctx, "cache:rebuild", time.Minute)
	fmt.Println("gave up after waiting:", strings.Contains(err.Error(), "after waiting"), errors.Is(err, pgfence.ErrNotAcquired))

	// Once the holder releases, the waiter gets the key with a larger fence.
	if err := held.Release(ctx); err != nil {
		log.Fatal(err)
	}
	next, err := waiter.Acquire(ctx, "cache:rebuild", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	defer next.Release(ctx)
	fmt.Println("granted, fence larger:", next.Fence() > held.Fence())
	// Output:
	// gave up after waiting: true true
	// granted, fence larger: true
}

// A lease's Context ends when the lease is lost: here a holder that does
// not renew sees its context end before the lease expires on the server.
func ExampleLease_Context() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	leases, err := pglease.New(pool, pglease.WithoutAutoRenew())
	if err != nil {
		log.Fatal(err)
	}
	defer leases.Close()

	lease, err := leases.TryAcquire(ctx, "report:hourly", 200*time.Millisecond)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	<-lease.Context().Done() // a worker checks it between steps
	fmt.Println("lost:", errors.Is(context.Cause(lease.Context()), pgfence.ErrLeaseLost))
	// Output: lost: true
}
