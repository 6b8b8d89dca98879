package claim

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/pgfence/pgfence/internal/batchwalk"
)

// defaultSweepBatch is how many rows one batch of SweepFinished reads (and
// at most deletes) in its own transaction: a batch holds its rows' locks
// until it commits, while a smaller one would take more round trips for
// the same sweep.
const defaultSweepBatch = 1000

// SweepFinished deletes finished jobs (completed and dead) of the claimer's queue
// whose finished_at is more than olderThan ago, and returns how many. It
// needs the table's FinishedAt column; a finished row whose finished_at is
// NULL is kept.
//
// It walks the table in id order in batches of 1000 rows, each its own
// short transaction, so that a sweep of millions of rows never holds locks,
// or keeps old row versions from being pruned, for longer than one batch;
// between batches it rests as long as the last batch took (package
// internal/batchwalk says why), so claims running meanwhile stay fast. Each delete re-checks the state and
// finished_at on the newest row version, so a job that is running,
// available, or finished more recently than olderThan ago stays, however
// its row changes during the sweep. Rows inserted behind the walk wait for
// the next sweep. When ctx ends between or during batches it returns the
// rows deleted so far with ctx's error. Each batch is one statement,
// SweepFinishedJobsBatch in queries/internal/claim.sql, which says how it reads and deletes
// and why it commits asynchronously.
func (c *Claimer) SweepFinished(ctx context.Context, olderThan time.Duration) (int64, error) {
	if olderThan < 0 {
		return 0, invalid("sweep age must not be negative, got %v", olderThan)
	}
	if c.cfg.table.FinishedAt == "" {
		return 0, invalid("SweepFinished needs the table's FinishedAt column, and table %s names none (Table.FinishedAt)", c.cfg.table.ident())
	}
	batch := c.cfg.sweepBatch
	if batch == 0 {
		batch = defaultSweepBatch
	}
	var total int64
	after := int64(math.MinInt64)
	err := batchwalk.Run(ctx, func(ctx context.Context) (bool, error) {
		var scanned, deleted int64
		err := c.db.QueryRow(ctx, c.sql.sweep, c.queueArgs(after, batch, olderThan.Microseconds())...).
			Scan(&scanned, &after, &deleted)
		total += deleted
		return scanned == int64(batch), err
	})
	if err != nil {
		return total, c.sweepStopped(total, err)
	}
	return total, nil
}

func (c *Claimer) sweepStopped(n int64, err error) error {
	return fmt.Errorf("claim: sweep stopped after deleting %d jobs: %w", n, err)
}
