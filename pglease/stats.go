package pglease

import (
	"sync/atomic"
	"time"
)

// Stats are a client's counters since New, for the signals worth
// watching: contention and wait time, renewal failures, leases lost, and
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
