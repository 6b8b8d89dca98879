package claim

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

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
// rows deleted so far with ctx's error.
func (c *Claimer) Purge(ctx context.Context, olderThan time.Duration) (int64, error) {
	if olderThan < 0 {
		return 0, invalid("purge age must not be negative, got %v", olderThan)
	}
	stmt, err := buildPurge(c.cfg.table)
	if err != nil {
		return 0, err
	}
	batch := c.cfg.purgeBatch
	if batch == 0 {
		batch = DefaultPurgeBatch
	}
	var total int64
	after := int64(math.MinInt64)
	err = batchwalk.Run(ctx, func(ctx context.Context) (bool, error) {
		var scanned, deleted int64
		err := pgmode.Wrap(c.pool).QueryRow(ctx, stmt, c.queueArgs(after, batch, olderThan.Microseconds())...).
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

// buildPurge is one batch of Purge: it reads the next $2 rows in id order
// after $1 (a cursor on the id, which is unique and so indexed; no index on
// finished_at needed) and deletes those finished more than $3 microseconds
// ago. It returns the rows read (fewer than $2: the walk is done), the last
// id read (the next cursor) and the rows deleted.
//
// It commits asynchronously (synchronous_commit = off for this transaction
// only): a delete lost in a crash leaves a finished job that the next purge
// deletes, and a finished job is never claimed again.
func buildPurge(t Table) (string, error) {
	if t.FinishedAt == "" {
		return "", invalid("Purge needs the table's FinishedAt column, and table %s names none (Table.FinishedAt)", t.ident())
	}
	q := func(col string) string { return pgx.Identifier{col}.Sanitize() }
	queue, cols := "", "{id}, {state}, {fin}"
	if t.Queue != "" {
		queue, cols = " AND {q} = $4", cols+", {q}"
	}
	finished := "{state} IN ('completed', 'dead') AND {fin} < now() - $3::bigint * interval '1 microsecond'" + queue
	r := strings.NewReplacer("{tbl}", t.ident(), "{id}", q(t.ID), "{state}", q(t.State), "{fin}", q(t.FinishedAt), "{q}", q(t.Queue))
	return r.Replace(`WITH batch AS (
  SELECT ` + cols + ` FROM {tbl} WHERE {id} > $1::bigint ORDER BY {id} LIMIT $2::int
), deleted AS (
  DELETE FROM {tbl}
   WHERE {id} = ANY (ARRAY(SELECT {id} FROM batch WHERE ` + finished + `))
     AND ` + finished + `
  RETURNING 1
)
SELECT (SELECT count(*) FROM batch)::bigint,
       COALESCE((SELECT max({id}) FROM batch), 0)::bigint,
       (SELECT count(*) FROM deleted)::bigint
 WHERE set_config('synchronous_commit', 'off', true) = 'off'`), nil
}
