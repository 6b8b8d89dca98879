package pglease

import (
	"context"
	"time"

	"github.com/pgfence/pgfence/internal/validate"
)

// SweepBatchForTest sets how many rows each batch of SweepExpired takes, so
// that a test reaches several batches with a few rows.
func SweepBatchForTest(n int) Option {
	return func(c *config) error { c.sweepBatch = n; return nil }
}

// ObserveIntervalForTest sets how often Observe polls.
func ObserveIntervalForTest(d time.Duration) Option {
	return func(c *config) error { c.observePoll = d; return nil }
}

// SetRenewHook replaces the renew statement of c's leases, for tests that
// stall or fail renewals.
func SetRenewHook(c *Client, h func(ctx context.Context, l *Lease) (time.Time, error)) {
	c.renewHook = h
}

// GroupBatched is how many attempts c sent in batches of two or more.
func GroupBatched(c *Client) int64 { return c.group.batched.Load() }

// GroupPending is how many attempts wait in c's queue for the next batch.
func GroupPending(c *Client) int {
	c.group.mu.Lock()
	defer c.group.mu.Unlock()
	return len(c.group.pending)
}

// GroupMaxInFlight is how many acquisitions of one client run before
// further attempts queue.
const GroupMaxInFlight = maxInFlight

// Bounds that tests in package pglease_test probe.
const (
	ResolveBound            = resolveBound
	AbandonedTokenRetention = abandonedTokenRetention
	MaxPermits              = validate.MaxPermits
	MaxSetKeys              = validate.MaxSetKeys
)
