package claim_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/claim"
)

// Claim a batch, do the work, complete each job. A worker that stalled past
// its lease finds its completion refused.
func ExampleClaimer() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	c, err := claim.New(ctx, pool, claim.WithQueue("example-emails"), claim.WithOwner("mailer-1"))
	if err != nil {
		log.Fatal(err)
	}
	for i := range 3 {
		payload := []byte(fmt.Sprintf(`{"user":%d}`, i))
		if _, err := c.Enqueue(ctx, pool, claim.NewJob{Kind: "welcome", Payload: payload}); err != nil {
			log.Fatal(err)
		}
	}
	jobs, err := c.Claim(ctx, 10, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	for _, j := range jobs {
		// ... send the e-mail, with an idempotency key derived from j.ID ...
		err := c.Complete(ctx, j)
		switch {
		case errors.Is(err, pgfence.ErrLeaseLost):
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

// A Runner: 4 workers, renewals at a third of the TTL, rescue of
// expired leases, LISTEN/NOTIFY wake-up, graceful shutdown when ctx ends.
func ExampleRunner() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	c, err := claim.New(ctx, pool, claim.WithQueue("example-pool"))
	if err != nil {
		log.Fatal(err)
	}
	var done atomic.Int32
	r, err := claim.NewRunner(c, func(ctx context.Context, j *claim.Job) error {
		// ctx ends if the lease is lost: stop starting side effects then.
		if done.Add(1) == 5 {
			stop() // enough for the example: shut down gracefully
		}
		return nil
	}, claim.WithWorkers(4), claim.WithTTL(30*time.Second), claim.WithListen("example_pool_jobs"))
	if err != nil {
		log.Fatal(err)
	}
	for range 5 {
		if _, err := c.Enqueue(ctx, pool, claim.NewJob{Notify: "example_pool_jobs"}); err != nil {
			log.Fatal(err)
		}
	}
	if err := r.Run(ctx); err != nil { // returns after the graceful shutdown
		log.Fatal(err)
	}
	fmt.Println("handled", done.Load(), "jobs")
	// Output: handled 5 jobs
}
