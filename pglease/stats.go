package pglease

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// Stats are a client's counters since New, for the signals the lesson says
// to watch: contention and wait time, renewal failures, leases lost, and
// ambiguous acquisitions.
type Stats struct {
	Acquired          int64         // leases granted
	NotAcquired       int64         // attempts refused because the key was held
	Waited            time.Duration // total time Acquire spent waiting
	RenewFailures     int64         // renewal attempts that failed transiently
	Lost              int64         // leases lost (expired, taken, or local deadline)
	AmbiguousAcquires int64         // acquisitions whose answer was lost and then settled
}

type counters struct {
	acquired, notAcquired, waitedNanos, renewFailures, lost, ambiguous atomic.Int64
}

// Stats returns a snapshot of the client's counters.
func (c *Client) Stats() Stats {
	return Stats{
		Acquired:          c.stats.acquired.Load(),
		NotAcquired:       c.stats.notAcquired.Load(),
		Waited:            time.Duration(c.stats.waitedNanos.Load()),
		RenewFailures:     c.stats.renewFailures.Load(),
		Lost:              c.stats.lost.Load(),
		AmbiguousAcquires: c.stats.ambiguous.Load(),
	}
}

// SweepExpired deletes lease rows that expired more than olderThan ago and
// returns how many. It is safe at any time: fences come from a sequence, not
// from the rows, so a deleted row never lets a fence repeat. Run it now and
// then (say hourly) when keys are many and short-lived. It also deletes the
// tombstones of abandoned acquisitions older than AbandonedTokenRetention
// (not counted in the result), whatever olderThan says.
func (c *Client) SweepExpired(ctx context.Context, olderThan time.Duration) (int64, error) {
	if olderThan < 0 {
		return 0, invalid("sweep grace must not be negative, got %v", olderThan)
	}
	n, err := c.queries(ctx).SweepExpired(ctx, olderThan.Microseconds())
	if err != nil {
		return n, err
	}
	if _, err := c.queries(ctx).SweepAbandonedTokens(ctx, AbandonedTokenRetention.Microseconds()); err != nil {
		return n, fmt.Errorf("pglease: deleting old tombstones of abandoned acquisitions: %w", err)
	}
	return n, nil
}
