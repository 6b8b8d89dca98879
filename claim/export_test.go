package claim

import (
	"context"
	"time"
)

// The batched writes, for tests in package claim_test that need two attempts
// of one job in the same batch, which a Runner produces only by chance.

func (c *Claimer) CompleteManyForTest(ctx context.Context, jobs []*Job) ([]error, error) {
	return c.completeMany(ctx, jobs)
}

func (c *Claimer) SettleManyForTest(ctx context.Context, jobs []*Job) ([]error, error) {
	return c.settleMany(ctx, jobs)
}

func (c *Claimer) RenewManyForTest(ctx context.Context, jobs []*Job, ttl time.Duration) ([]*Job, error) {
	return c.renewMany(ctx, jobs, ttl)
}

func (c *Claimer) CompleteAndClaimForTest(ctx context.Context, done []*Job, n int, ttl time.Duration) ([]error, []*Job, error) {
	return c.completeAndClaim(ctx, done, n, ttl)
}

// AmbiguousForTest reports whether a Runner would settle err by reading
// the jobs back.
func AmbiguousForTest(err error) bool { return ambiguous(err) }

// Limits and defaults that tests in package claim_test probe the edges of.
const (
	MaxBatch = maxBatch
)

func DefaultTable() Table { return defaultTable() }

// SweepBatchForTest sets how many rows each batch of SweepFinished takes, so
// that a test reaches several batches with a few rows.
func SweepBatchForTest(n int) Option {
	return claimerOption("SweepBatchForTest", func(c *config) error { c.sweepBatch = n; return nil })
}
