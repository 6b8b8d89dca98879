package pglease

import (
	"context"
	"errors"
	"time"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/validate"
)

// PeriodRun is what OncePerPeriod's function gets: the lease it runs under
// and the period it runs for, by the database clock.
type PeriodRun struct {
	// Lease is the key's lease, held (and renewed) while the function runs.
	Lease *Lease
	// Start and End bound the period, by the database clock: periods are
	// the multiples of the period length since the Unix epoch.
	Start, End time.Time
	// Index is the period's number, Start / period length: a natural
	// idempotency key for the run's writes.
	Index int64
}

// OncePerPeriod runs fn for key at most once per period across every
// instance that calls it with the same key and period, and reports whether
// it ran. Call it on every tick of each instance's scheduler, as often as
// you like: the first call of a period takes key's lease (for ttl,
// auto-renewed while fn runs) and runs fn; the lease is then held until the
// period ends, by the database clock (a minimum hold, see
// Lease.HoldAtLeast), so a later call in the same period, from any
// instance and whatever its clock says, finds it held and returns false. A
// run that lasts past the period's end keeps the key until it returns, so
// it never overlaps the next run; the next call after it runs once for the
// period it is in, and periods missed meanwhile are not made up.
//
// A run whose instance dies keeps the key only until its lease's TTL: an
// instance may then run the same period again. Where a second run must
// never happen, make the run's effect idempotent per period (PeriodRun.Index
// as a unique key), which needs no lock at all. period must lie in [1ms,
// 24h].
func (c *Client) OncePerPeriod(ctx context.Context, key string, period, ttl time.Duration, fn func(ctx context.Context, run PeriodRun) error) (bool, error) {
	if fn == nil {
		return false, invalid("OncePerPeriod needs a function to run")
	}
	if period < time.Millisecond || period > validate.MaxTTL {
		return false, invalid("period %v is outside [1ms, %v]", period, validate.MaxTTL)
	}
	l, err := c.TryAcquire(ctx, key, ttl)
	if errors.Is(err, pgfence.ErrNotAcquired) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	// The grant time by the database clock: the acquisition set expires_at
	// to its now() plus the TTL.
	granted := l.ExpiresAt().Add(-ttl)
	index := granted.UnixMicro() / period.Microseconds()
	run := PeriodRun{Lease: l, Index: index,
		Start: time.UnixMicro(index * period.Microseconds()), End: time.UnixMicro((index + 1) * period.Microseconds())}
	if err := l.HoldAtLeast(run.End.Sub(granted)); err != nil {
		l.Release(ctx)
		return false, err
	}
	return true, c.run(ctx, l, func(ctx context.Context, _ *Lease) error { return fn(ctx, run) })
}
