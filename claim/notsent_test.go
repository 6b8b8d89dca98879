package claim_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// A batched completion that cannot take a pool connection before its
// timeout sent nothing: its error is not ambiguous (no read-back, which
// would wait on the same exhausted pool), and the jobs still run under
// their leases. The same for the combined complete-and-claim round trip.
func TestCompletionNotSentIsNotAmbiguous(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	qn := queue("notsent")
	c := newClaimer(t, pool, qn)
	enqueueMany(t, pool, qn, 2, 1)
	jobs, err := c.Claim(ctx, 2, time.Minute)
	if err != nil || len(jobs) != 2 {
		t.Fatalf("claim: %d jobs, %v", len(jobs), err)
	}
	held, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func(context.Context) error{
		"completeMany": func(ctx context.Context) error {
			_, err := c.CompleteManyForTest(ctx, jobs)
			return err
		},
		"completeAndClaim": func(ctx context.Context) error {
			_, _, err := c.CompleteAndClaimForTest(ctx, jobs, 1, time.Minute)
			return err
		},
	} {
		tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		err := call(tctx)
		cancel()
		if err == nil || claim.AmbiguousForTest(err) {
			t.Errorf("%s on an exhausted pool: %v (ambiguous %v), want an error that is not ambiguous", name, err, claim.AmbiguousForTest(err))
		}
	}
	held.Release()
	var running int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pgfence_jobs WHERE queue = $1 AND state = 'running'`, qn).Scan(&running); err != nil || running != 2 {
		t.Fatalf("%d jobs running (%v), want 2", running, err)
	}
}
