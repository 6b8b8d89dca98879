package claim

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/internal/pgdb"
	"github.com/pgfence/pgfence/internal/pgerr"
)

// The batched writes Runner uses. Each takes jobs of one claimer and sends one
// statement whatever their number; every row is still matched on its own
// id + fence + state 'running', and each job learns on its own whether its
// write counted.

// attemptKey names one attempt of a job: a batch may hold two of the same
// job (a stale worker's late write and the new attempt's), told apart by
// their fences.
type attemptKey struct{ id, fence int64 }

func attemptOf(j *Job) attemptKey { return attemptKey{j.ID, j.Fence} }

// idsAndFences returns the parallel arrays the batch statements take.
func idsAndFences(jobs []*Job) (ids, fences []int64) {
	ids, fences = make([]int64, len(jobs)), make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i], fences[i] = j.ID, j.Fence
	}
	return ids, fences
}

// renewMany extends the leases of jobs (all of TTL ttl) in one
// statement. It returns the jobs whose lease was lost (not extended); the
// others' local deadlines have moved. An error means nothing is known: the
// leases stay valid until their deadlines.
func (c *Claimer) renewMany(ctx context.Context, jobs []*Job, ttl time.Duration) (lost []*Job, err error) {
	ids, fences := idsAndFences(jobs)
	sent := time.Now()
	rows, err := c.db.Query(ctx, c.sql.renewMany, ids, fences, ttl.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("claim: renew %d jobs: %w", len(jobs), err)
	}
	until := make(map[attemptKey]time.Time, len(jobs))
	var a attemptKey
	var u time.Time
	_, err = pgx.ForEachRow(rows, []any{&a.id, &a.fence, &u}, func() error { until[a] = u; return nil })
	if err != nil {
		return nil, fmt.Errorf("claim: renew %d jobs: %w", len(jobs), err)
	}
	for _, j := range jobs {
		if u, ok := until[attemptOf(j)]; ok {
			j.extend(sent, u)
		} else {
			lost = append(lost, j)
		}
	}
	return lost, nil
}

// completeMany completes jobs in one durable statement and returns, per job
// (same order), nil when its completion counted and a *pgfence.LeaseLostError when
// it did not. A non-nil error means the outcome of every job is unknown: the
// statement may or may not have committed (see settleMany).
func (c *Claimer) completeMany(ctx context.Context, jobs []*Job) ([]error, error) {
	ids, fences := idsAndFences(jobs)
	// c.db marks a failure to take a pool connection: nothing was
	// sent, so the outcome is known and needs no read-back (ambiguous).
	rows, err := c.db.Query(ctx, c.sql.completeMany, ids, fences)
	if err != nil {
		return nil, fmt.Errorf("claim: complete %d jobs: %w", len(jobs), err)
	}
	done := make(map[attemptKey]bool, len(jobs))
	var a attemptKey
	if _, err := pgx.ForEachRow(rows, []any{&a.id, &a.fence}, func() error { done[a] = true; return nil }); err != nil {
		return nil, fmt.Errorf("claim: complete %d jobs: %w", len(jobs), err)
	}
	res := make([]error, len(jobs))
	for i, j := range jobs {
		if !done[attemptOf(j)] {
			res[i] = refusedWrite("complete", j)
		}
	}
	return res, nil
}

// completeAndClaim completes done and claims up to n jobs in one round trip
// and one transaction: a pipeline of the two statements with one Sync, which
// PostgreSQL runs as one implicit transaction, so the runner pays one durable
// commit for both. The completions count only if that transaction commits,
// so res (as completeMany's) is returned only once the commit is
// acknowledged. On any error nothing is known about the completions (settle
// them with settleMany) and any rows the claim took wait for Rescue, as
// after a failed Claim.
func (c *Claimer) completeAndClaim(ctx context.Context, done []*Job, n int, ttl time.Duration) (res []error, jobs []*Job, err error) {
	ids, fences := idsAndFences(done)
	b := &pgx.Batch{}
	b.Queue(c.sql.completeMany, ids, fences)
	b.Queue(c.sql.claim, c.claimArgs(n, ttl)...)
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("claim: complete %d jobs and claim: %w", len(done), &pgdb.NotSentError{Err: err})
	}
	defer conn.Release()
	sent := time.Now()
	br := conn.SendBatch(ctx, b)
	defer br.Close()
	rows, err := br.Query()
	if err != nil {
		return nil, nil, fmt.Errorf("claim: complete %d jobs and claim: %w", len(done), err)
	}
	completed := make(map[attemptKey]bool, len(done))
	var a attemptKey
	if _, err := pgx.ForEachRow(rows, []any{&a.id, &a.fence}, func() error { completed[a] = true; return nil }); err != nil {
		return nil, nil, fmt.Errorf("claim: complete %d jobs and claim: %w", len(done), err)
	}
	rows, err = br.Query()
	if err != nil {
		return nil, nil, c.explain("claim", err)
	}
	if jobs, err = c.scanClaimed(rows, sent, ttl); err != nil {
		return nil, nil, err
	}
	// Close reads up to the ReadyForQuery that follows the commit.
	if err := br.Close(); err != nil {
		return nil, nil, fmt.Errorf("claim: commit completions and claim: %w", err)
	}
	c.met.claimed(len(jobs))
	res = make([]error, len(done))
	for i, j := range done {
		if !completed[attemptOf(j)] {
			res[i] = refusedWrite("complete", j)
		}
	}
	return res, jobs, nil
}

// readBack reports, for each job (by id + fence), the state of its row if
// the row still carries the job's fence (absent when it does not: another
// claim has the job since). It waits for any transaction still holding one of the rows, so the
// states it returns are final. On the pool (q the claimer's db) it runs on whichever
// connection is free: never the one whose answer was lost, which pgx has
// closed; Claimer.complete passes the caller's transaction instead.
func (c *Claimer) readBack(ctx context.Context, q pgdb.DB, jobs []*Job) (map[attemptKey]string, error) {
	ids, fences := idsAndFences(jobs)
	rows, err := q.Query(ctx, c.sql.readBack, ids, fences)
	if err != nil {
		return nil, fmt.Errorf("claim: read back %d jobs: %w", len(jobs), err)
	}
	states := make(map[attemptKey]string, len(jobs))
	var a attemptKey
	var state string
	if _, err := pgx.ForEachRow(rows, []any{&a.id, &a.fence, &state}, func() error { states[a] = state; return nil }); err != nil {
		return nil, fmt.Errorf("claim: read back %d jobs: %w", len(jobs), err)
	}
	return states, nil
}

// settleMany finds out what an ambiguous completeMany did, the way an
// ambiguous acquire is settled: it sends the completion again (rows that the
// first one completed no longer match state 'running'; rows it did not
// complete are completed now, still only under their fence) and then reads
// back, in a new statement and so a new snapshot, which of the rest are
// completed under their fence. Result as completeMany's.
func (c *Claimer) settleMany(ctx context.Context, jobs []*Job) ([]error, error) {
	res, err := c.completeMany(ctx, jobs)
	if err != nil {
		return nil, err
	}
	var rest []*Job
	for i, j := range jobs {
		if res[i] != nil {
			rest = append(rest, j)
		}
	}
	if len(rest) == 0 {
		return res, nil
	}
	states, err := c.readBack(ctx, c.db, rest)
	if err != nil {
		return nil, err
	}
	for i, j := range jobs {
		if res[i] != nil && states[attemptOf(j)] == "completed" {
			res[i] = nil
		}
	}
	return res, nil
}

// ambiguous reports whether err leaves a write's outcome unknown: any error
// but the server's own answer and a statement never sent (no connection
// could be taken from the pool: pgdb.NotSent). pgconn.SafeToRetry is no guide
// here: a COMMIT whose answer was cut off comes back from pgx as a "conn
// closed" error that claims to be safe to retry, although the server
// received and ran it. So every such error is settled by reading back,
// which is always correct.
func ambiguous(err error) bool {
	return err != nil && !pgerr.FromServer(err) && !pgdb.NotSent(err)
}
