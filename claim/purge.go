package claim

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/pgfence/pgfence/internal/batchwalk"
	"github.com/pgfence/pgfence/internal/pgmode"
)

const (
	// DefaultPurgeBatch is how many rows one batch of Purge reads (and at
	// most deletes) in its own transaction, unless WithPurgeBatch says
	// otherwise.
	DefaultPurgeBatch = 1000
	// MaxPurgeBatch is the largest batch WithPurgeBatch accepts: a batch
	// holds its rows' locks until it commits.
	MaxPurgeBatch = 100000
)

// WithPurgeBatch sets how many rows each batch of Purge reads in id order,
// and so at most deletes, in one short transaction. Default:
// DefaultPurgeBatch. n must lie in [1, MaxPurgeBatch].
func WithPurgeBatch(n int) Option {
	return func(c *config) error {
		if n < 1 || n > MaxPurgeBatch {
			return invalid("purge batch %d is outside [1, %d]", n, MaxPurgeBatch)
		}
		c.purgeBatch = n
		return nil
	}
}

// Purge deletes finished jobs (completed and dead) of the claimer's queue
// whose finished_at is more than olderThan ago, and returns how many. It
// needs the table's FinishedAt column; a finished row whose finished_at is
// NULL is kept.
//
// It walks the table in id order in batches (WithPurgeBatch), each its own
// short transaction, so that a purge of millions of rows never holds locks,
// or keeps old row versions from being pruned, for longer than one batch;
// between batches it rests as long as the last batch took (package
// internal/batchwalk says why), so claims running meanwhile stay fast. Each delete re-checks the state and
// finished_at on the newest row version, so a job that is running,
// available, or finished more recently than olderThan ago stays, however
// its row changes during the purge. Rows inserted behind the walk wait for
// the next purge. When ctx ends between or during batches it returns the
// rows deleted so far with ctx's error. Each batch is one statement,
// PurgeJobsBatch in queries/claim.sql, which says how it reads and deletes
// and why it commits asynchronously.
func (c *Claimer) Purge(ctx context.Context, olderThan time.Duration) (int64, error) {
	if olderThan < 0 {
		return 0, invalid("purge age must not be negative, got %v", olderThan)
	}
	if c.cfg.table.FinishedAt == "" {
		return 0, invalid("Purge needs the table's FinishedAt column, and table %s names none (Table.FinishedAt)", c.cfg.table.ident())
	}
	batch := c.cfg.purgeBatch
	if batch == 0 {
		batch = DefaultPurgeBatch
	}
	var total int64
	after := int64(math.MinInt64)
	err := batchwalk.Run(ctx, func(ctx context.Context) (bool, error) {
		var scanned, deleted int64
		err := pgmode.Wrap(c.pool).QueryRow(ctx, c.sql.purge, c.queueArgs(after, batch, olderThan.Microseconds())...).
			Scan(&scanned, &after, &deleted)
		total += deleted
		return scanned == int64(batch), err
	})
	if err != nil {
		return total, c.purgeStopped(total, err)
	}
	return total, nil
}

func (c *Claimer) purgeStopped(n int64, err error) error {
	return fmt.Errorf("claim: purge stopped after deleting %d jobs: %w", n, err)
}
