package claim_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/internal/pgtest"
)

// examplePool stands for your own pool: pgxpool.New(ctx, databaseURL), on a
// database where pgfence's migrations ran.
func examplePool() *pgxpool.Pool {
	pool, err := pgxpool.New(context.Background(), pgtest.URL())
	if err != nil {
		panic(err)
	}
	return pool
}

// Claim a batch, do the work, complete each job. A worker that stalled past
// its lease finds its completion refused.
func ExampleClaimer() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	for i := range 3 {
		claim.Enqueue(ctx, pool, claim.NewJob{Queue: "example-emails", Kind: "welcome", Payload: []byte(fmt.Sprintf(`{"user":%d}`, i))})
	}
	c, err := claim.New(ctx, pool, claim.WithQueue("example-emails"), claim.WithOwner("mailer-1"))
	if err != nil {
		panic(err)
	}
	jobs, err := c.Claim(ctx, 10, 30*time.Second)
	if err != nil {
		panic(err)
	}
	for _, j := range jobs {
		// ... send the e-mail, with an idempotency key derived from j.ID ...
		err := c.Complete(ctx, j)
		switch {
		case errors.Is(err, claim.ErrLeaseLost):
			fmt.Println("job", string(j.Payload), "was taken over; its result does not count")
		case err != nil:
			fmt.Println("could not record:", err)
		default:
			fmt.Println("completed", string(j.Payload), "attempt", j.Attempt)
		}
	}
	// Output:
	// completed {"user": 0} attempt 1
	// completed {"user": 1} attempt 1
	// completed {"user": 2} attempt 1
}

// A worker pool: 4 workers, renewals at a third of the TTL, rescue of
// expired leases, LISTEN/NOTIFY wake-up, graceful shutdown when ctx ends.
func ExamplePool() {
	pool := examplePool()
	defer pool.Close()
	ctx, stop := context.WithCancel(context.Background())
	c, err := claim.New(ctx, pool, claim.WithQueue("example-pool"))
	if err != nil {
		panic(err)
	}
	var done atomic.Int32
	p, err := claim.NewRunner(c, func(ctx context.Context, j *claim.Job) error {
		// ctx ends if the lease is lost: stop starting side effects then.
		if done.Add(1) == 5 {
			stop() // enough for the example: shut down gracefully
		}
		return nil
	}, claim.WithWorkers(4), claim.WithTTL(30*time.Second), claim.WithListen("example_pool_jobs"))
	if err != nil {
		panic(err)
	}
	for range 5 {
		claim.Enqueue(ctx, pool, claim.NewJob{Queue: "example-pool", Notify: "example_pool_jobs"})
	}
	if err := p.Run(ctx); err != nil { // returns after the graceful shutdown
		panic(err)
	}
	fmt.Println("handled", done.Load(), "jobs")
	// Output: handled 5 jobs
}
