package pglease

import (
	"context"
	"fmt"
	"time"

	"github.com/pgfence/pgfence/internal/batchwalk"
	"github.com/pgfence/pgfence/internal/fencesql"
)

// defaultSweepBatch is how many rows one batch of SweepExpired reads (and
// at most deletes) in its own transaction: a batch holds its rows' locks
// until it commits, delaying the acquisitions that wait for them, while a
// smaller one would take more round trips for the same sweep.
const defaultSweepBatch = 1000

// SweepExpired deletes lease rows that expired more than olderThan ago
// (keys' rows, and the rows of shared holders and permits) and returns how
// many. It is safe at any time: fences come from a
// sequence, not from the rows, so a deleted row never lets a fence repeat,
// and each delete re-checks the expiry, so a row acquired or renewed during
// the sweep stays. Run it now and then (say hourly) when keys are many and
// short-lived. It also deletes, uncounted, the places that fair waiters
// left in a queue when they died (expired more than olderThan ago), and the
// tombstones of abandoned acquisitions older than an hour, whatever
// olderThan says.
//
// It walks the table in key and slot order in batches of 1000 rows, each its own
// short transaction, so that a sweep of millions of rows never holds locks,
// or keeps old row versions from being pruned, for longer than one batch;
// between batches it rests as long as the last batch took (package
// internal/batchwalk says why), so acquisitions running meanwhile stay
// fast. Rows inserted behind the walk wait for the next sweep. When ctx ends between or during batches it
// returns the rows deleted so far with ctx's error; what was deleted stays
// deleted.
func (c *Client) SweepExpired(ctx context.Context, olderThan time.Duration) (int64, error) {
	if olderThan < 0 {
		return 0, invalid("sweep grace must not be negative, got %v", olderThan)
	}
	n, err := c.sweepLeases(ctx, olderThan)
	if err != nil {
		return n, fmt.Errorf("pglease: sweep stopped after deleting %d expired leases: %w", n, err)
	}
	if err := c.sweepPlaces(ctx, olderThan); err != nil {
		return n, fmt.Errorf("pglease: deleting expired places of fair waiters: %w", err)
	}
	if err := c.sweepTombstones(ctx); err != nil {
		return n, fmt.Errorf("pglease: deleting old tombstones of abandoned acquisitions: %w", err)
	}
	return n, nil
}

// The walks start after the empty string, which sorts before every
// non-empty text in any deterministic collation (keys are at least one
// byte; tokens are random hex).

func (c *Client) sweepLeases(ctx context.Context, olderThan time.Duration) (int64, error) {
	var total int64
	afterKey, afterSlot := "", int32(-1)
	err := batchwalk.Run(ctx, func(ctx context.Context) (bool, error) {
		r, err := c.own(ctx).SweepExpiredBatch(ctx, fencesql.SweepExpiredBatchParams{
			AfterKey: afterKey, AfterSlot: afterSlot, BatchSize: int32(c.cfg.sweepBatch), GraceMicros: olderThan.Microseconds(),
		})
		if err != nil {
			return false, err
		}
		total += r.Deleted
		afterKey, afterSlot = r.LastKey, r.LastSlot
		return r.Scanned == int64(c.cfg.sweepBatch), nil
	})
	return total, err
}

// sweepPlaces deletes the places waiters left behind when they died, a
// batch at a time.
func (c *Client) sweepPlaces(ctx context.Context, olderThan time.Duration) error {
	return batchwalk.Run(ctx, func(ctx context.Context) (bool, error) {
		most, err := c.own(ctx).SweepPlacesBatch(ctx, fencesql.SweepPlacesBatchParams{
			GraceMicros: olderThan.Microseconds(), BatchSize: int32(c.cfg.sweepBatch),
		})
		return err == nil && most == int64(c.cfg.sweepBatch), err
	})
}

func (c *Client) sweepTombstones(ctx context.Context) error {
	after := ""
	return batchwalk.Run(ctx, func(ctx context.Context) (bool, error) {
		r, err := c.own(ctx).SweepAbandonedTokensBatch(ctx, fencesql.SweepAbandonedTokensBatchParams{
			AfterToken: after, BatchSize: int32(c.cfg.sweepBatch), RetentionMicros: abandonedTokenRetention.Microseconds(),
		})
		if err != nil {
			return false, err
		}
		after = r.LastToken
		return r.Scanned == int64(c.cfg.sweepBatch), nil
	})
}
