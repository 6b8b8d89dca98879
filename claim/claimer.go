package claim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/internal/pgdb"
	"github.com/pgfence/pgfence/internal/pgerr"
)

// Claimer claims job rows from one table (and queue) and makes the fenced
// writes on them. It is safe for concurrent use and holds no goroutines.
type Claimer struct {
	pool *pgxpool.Pool
	db   pgdb.DB // pool through pgdb.Wrap, built once
	cfg  config
	sql  statements
	// enqueue is Enqueue's statement on the claimer's table (enqueue.go).
	enqueue string
	// pipeline: completions may ride in a claim's pipeline (a pgx.Batch,
	// sent in the pool's default mode), which is unsafe behind a
	// transaction pooler when that mode prepares named statements.
	pipeline bool
	met      *metrics // OpenTelemetry instruments (metrics.go)
}

// Job is one claimed job row. Pass it back to Renew, Complete, Fail or
// Release: each matches the row on ID + Fence + state 'running'.
type Job struct {
	ID          int64
	Fence       int64 // this claim's fencing token; unique, never reissued
	Attempt     int   // 1 for the first attempt
	MaxAttempts int
	// Payload is the payload column as JSON (to_jsonb), nil when the table
	// has none.
	Payload json.RawMessage
	// Kind is the kind column (what NewJob.Kind wrote), "" when the table
	// has none.
	Kind string

	ttl time.Duration
	// counted: this Job's completion is in pgfence.job.completed, so a
	// retried or repeated completion of it is not counted again.
	counted atomic.Bool
	mu      sync.Mutex
	// expiresAt: as the database last reported it (display only).
	expiresAt time.Time
	// deadline: local, monotonic. The lease counts as lost after it.
	deadline time.Time
}

// ExpiresAt is the lease's end as the database reported it at the claim or
// last renewal, by the database clock. For display; never compare it with
// this machine's clock.
func (j *Job) ExpiresAt() time.Time {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.expiresAt
}

// Deadline is the local deadline on the monotonic clock: time just before
// the claim or last successful renewal was sent, plus the TTL, minus a
// tenth of it (as pglease's default). After it, treat the lease as lost.
func (j *Job) Deadline() time.Time {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.deadline
}

func (j *Job) extend(sent, expiresAt time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.expiresAt = expiresAt
	j.deadline = schedule(j.ttl).Extend(j.deadline, sent)
}

// New returns a claimer on pool. It checks the table and its columns against
// the catalog (see Table), so a wrong name or type fails here with a clear
// error, before any job is touched.
func New(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (*Claimer, error) {
	if pool == nil {
		return nil, invalid("nil pool")
	}
	cfg := defaultConfig()
	if err := apply(opts, settings{claimer: &cfg}); err != nil {
		return nil, err
	}
	if cfg.schema != "" && !cfg.tableSet {
		cfg.table.Schema = cfg.schema // the ready-made table lives with the functions
	}
	if err := cfg.table.check(); err != nil {
		return nil, err
	}
	if err := cfg.table.verify(ctx, pool, cfg.schema); err != nil {
		return nil, err
	}
	pipeline, err := pgdb.PipelineSafe(ctx, pool, pool.Config().ConnConfig.DefaultQueryExecMode)
	if err != nil {
		return nil, fmt.Errorf("claim: checking for a connection pooler: %w", err)
	}
	stmts, err := buildStatements(cfg.table, cfg.schema)
	if err != nil {
		return nil, err
	}
	enqueue, err := enqueueStatement(cfg.table, cfg.schema)
	if err != nil {
		return nil, err
	}
	c := &Claimer{pool: pool, db: pgdb.Wrap(pool, ""), cfg: cfg, sql: stmts, enqueue: enqueue, pipeline: pipeline}
	c.met = newMetrics(c)
	return c, nil
}

// queueName is the queue the claimer claims from ("" when the table has no
// queue column), as the metrics name it.
func (c *Claimer) queueName() string {
	if c.cfg.table.Queue == "" {
		return ""
	}
	return c.cfg.queue
}

// queueArg is the queue parameter; statements without a queue column ignore
// it (they reference $N only when the column exists).
func (c *Claimer) queueArgs(args ...any) []any {
	if c.cfg.table.Queue != "" {
		return append(args, c.cfg.queue)
	}
	return args
}

func checkTTL(ttl time.Duration) error {
	if ttl < minTTL || ttl > maxTTL {
		return invalid("lease %v is outside [%v, %v]", ttl, minTTL, maxTTL)
	}
	return nil
}

// Claim takes up to n runnable jobs in one statement and returns them in
// claim order (priority, run_at, id); fewer (or none, and no error) when
// fewer are runnable. Rows locked by concurrent
// claimers are skipped, not waited for. Each claimed row is set running with
// attempt + 1, a new fence, this claimer's owner label and a lease of TTL
// ttl from the database's now(). The claim commits durably whatever
// the session's synchronous_commit, since a claim lost in a crash could see
// its fence issued again. n must lie in [1, 10000] and ttl in
// [10ms, 24h]; otherwise pgfence.ErrInvalidInput and nothing is claimed.
func (c *Claimer) Claim(ctx context.Context, n int, ttl time.Duration) ([]*Job, error) {
	if n < 1 || n > maxBatch {
		return nil, invalid("batch size %d is outside [1, %d]", n, maxBatch)
	}
	if err := checkTTL(ttl); err != nil {
		return nil, err
	}
	sent := time.Now()
	rows, err := c.db.Query(ctx, c.sql.claim, c.claimArgs(n, ttl)...)
	if err != nil {
		return nil, c.explain("claim", err)
	}
	jobs, err := c.scanClaimed(rows, sent, ttl)
	if err == nil {
		c.met.claimed(len(jobs))
	}
	return jobs, err
}

func (c *Claimer) claimArgs(n int, ttl time.Duration) []any {
	return c.queueArgs(n, c.cfg.owner, ttl.Microseconds())
}

// scanClaimed reads the claim statement's rows; sent is the time just before
// the claim was sent, the start of the jobs' local deadlines.
func (c *Claimer) scanClaimed(rows pgx.Rows, sent time.Time, ttl time.Duration) ([]*Job, error) {
	defer rows.Close()
	deadline := schedule(ttl).Deadline(sent)
	var jobs []*Job
	for rows.Next() {
		j := &Job{ttl: ttl, deadline: deadline}
		var attempt, maxAttempts int64
		dest := []any{&j.ID, &j.Fence, &attempt, &maxAttempts, &j.expiresAt}
		if c.cfg.table.Payload != "" {
			dest = append(dest, &j.Payload)
		}
		if c.cfg.table.Kind != "" {
			dest = append(dest, &j.Kind)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("claim: claim: %w", err)
		}
		j.Attempt, j.MaxAttempts = int(attempt), int(maxAttempts)
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, c.explain("claim", err)
	}
	return jobs, nil
}

func (c *Claimer) explain(op string, err error) error {
	var denied *pgdb.PrivilegeError
	if pgerr.IsUndefined(err) && !errors.As(err, &denied) {
		return fmt.Errorf("claim: %s: pgfence's schema is missing from this database (run `pgfence migrate up` or migrations.Up): %w", op, err)
	}
	return fmt.Errorf("claim: %s: %w", op, err)
}

func (c *Claimer) checkJob(j *Job) error {
	if j == nil {
		return invalid("nil job")
	}
	return nil
}

// Renew extends the job's lease by its TTL from the database's now(),
// only while the lease is unexpired and the row still runs under this fence:
// it never resurrects a lease that Rescue may have taken. On success the
// job's local deadline moves too. pgfence.ErrLeaseLost (a *pgfence.LeaseLostError) means stop
// working on the job; any other error is transient and the lease stays
// valid until Deadline.
//
// The TTL is the one given to the Claim that returned the job (a Runner's
// WithTTL), which only Claim records: a Job built by hand (&Job{ID: …, Fence: …}) has none, and Renew
// refuses it with pgfence.ErrInvalidInput, sending nothing, rather than guess a
// TTL (the Claimer has no TTL of its own; each Claim names one). Complete,
// Fail and Release need only ID and Fence and take such a Job.
func (c *Claimer) Renew(ctx context.Context, j *Job) error {
	if err := c.checkJob(j); err != nil {
		return err
	}
	if j.ttl == 0 {
		return invalid("job %d has no TTL: renew a Job returned by Claim (it carries the TTL it was claimed with), not one built by hand", j.ID)
	}
	sent := time.Now()
	var until time.Time
	err := c.db.QueryRow(ctx, c.sql.renew, j.ID, j.Fence, j.ttl.Microseconds()).Scan(&until)
	if errors.Is(err, pgx.ErrNoRows) {
		return refusedWrite("renew", j)
	}
	if err != nil {
		return fmt.Errorf("claim: renew job %d: %w", j.ID, err)
	}
	j.extend(sent, until)
	return nil
}

// Complete marks the job completed if it still runs under this fence.
// Completing twice with the same fence (a retry after a lost answer) is not
// an error, also when the retry waited for the first attempt's transaction
// (the row is read back after the wait when the statement changed nothing). pgfence.ErrLeaseLost means another worker has or had the job since: this
// attempt's result does not count.
func (c *Claimer) Complete(ctx context.Context, j *Job) error {
	err := c.complete(ctx, c.db, j)
	if err == nil {
		c.met.completed(j)
	}
	return err
}

// CompleteTx is Complete inside the caller's transaction, so the job's
// effects and its completion commit or roll back together: if the lease was
// lost, the caller rolls back its writes too. Note that in a transaction the
// statement sees row changes committed before it, and its own row lock holds
// off Rescue and other writers until the transaction ends.
func (c *Claimer) CompleteTx(ctx context.Context, tx pgx.Tx, j *Job) error {
	if tx == nil {
		return invalid("nil transaction")
	}
	err := c.complete(ctx, pgdb.Wrap(tx, ""), j)
	if err == nil {
		// Counted when the statement accepts: whether the caller's
		// transaction commits is not known here.
		c.met.completed(j)
	}
	return err
}

func (c *Claimer) complete(ctx context.Context, q pgdb.DB, j *Job) error {
	if err := c.checkJob(j); err != nil {
		return err
	}
	var ok bool
	if err := q.QueryRow(ctx, c.sql.complete, j.ID, j.Fence).Scan(&ok); err != nil {
		return fmt.Errorf("claim: complete job %d: %w", j.ID, err)
	}
	if !ok {
		// The statement's "already completed under this fence" check
		// reads its own snapshot, taken before its UPDATE waited for the
		// row lock. A retry (after a lost answer) queued behind the first
		// attempt's lock sees the row still running there: the UPDATE,
		// re-checking the committed row version after the wait, changes
		// nothing, and the check finds no completed row, although the
		// first attempt completed the job under this fence. So on this
		// (rare) path the row is read back in a second statement, a new
		// snapshot taken after the wait (in the caller's transaction for
		// CompleteTx, whose READ COMMITTED statements each take their
		// own), and a completion under this fence counts as success.
		states, err := c.readBack(ctx, q, []*Job{j})
		if err != nil {
			return fmt.Errorf("claim: complete job %d: %w", j.ID, err)
		}
		ok = states[attemptOf(j)] == "completed"
	}
	if !ok {
		c.met.leaseLost(opComplete)
		return refusedWrite("complete", j)
	}
	return nil
}

// FailResult says what Fail did with the job.
type FailResult struct {
	// Dead is true when the job used its last attempt and is now dead.
	Dead bool
	// RetryAt is when the job becomes runnable again, by the database clock
	// (zero when Dead).
	RetryAt time.Time
}

// Fail records a failed attempt if the job still runs under this fence: the
// job becomes available again at now() + the retry backoff (by the database
// clock), or dead when this was its last attempt. cause, if not nil, is
// stored in the last-error column when the table has one.
func (c *Claimer) Fail(ctx context.Context, j *Job, cause error) (FailResult, error) {
	if err := c.checkJob(j); err != nil {
		return FailResult{}, err
	}
	delay := min(max(c.cfg.backoff(j.Attempt), 0), maxRetryDelay)
	msg := ""
	if cause != nil {
		msg = cause.Error()
		if len(msg) > 4096 {
			msg = msg[:4096]
		}
		msg = toValidText(msg)
	}
	var state string
	var runAt time.Time
	args := []any{j.ID, j.Fence, delay.Microseconds()}
	if c.cfg.table.LastError != "" {
		args = append(args, msg)
	}
	err := c.db.QueryRow(ctx, c.sql.fail, args...).Scan(&state, &runAt)
	if errors.Is(err, pgx.ErrNoRows) {
		c.met.leaseLost(opFail)
		return FailResult{}, refusedWrite("fail", j)
	}
	if err != nil {
		return FailResult{}, fmt.Errorf("claim: fail job %d: %w", j.ID, err)
	}
	c.met.failed(state == "dead")
	if state == "dead" {
		return FailResult{Dead: true}, nil
	}
	return FailResult{RetryAt: runAt}, nil
}

// toValidText drops what PostgreSQL text cannot hold: NUL bytes and invalid
// UTF-8.
func toValidText(s string) string {
	b := make([]rune, 0, len(s))
	for _, r := range s {
		if r != 0 && r != 0xFFFD {
			b = append(b, r)
		}
	}
	return string(b)
}

// Release gives the job back to the queue if it still runs under this fence,
// runnable at once, and does not count the attempt (attempt - 1): use it
// when the worker did not get to do the work, for example on shutdown.
func (c *Claimer) Release(ctx context.Context, j *Job) error {
	if err := c.checkJob(j); err != nil {
		return err
	}
	tag, err := c.db.Exec(ctx, c.sql.release, j.ID, j.Fence)
	if err != nil {
		return fmt.Errorf("claim: release job %d: %w", j.ID, err)
	}
	if tag.RowsAffected() == 0 {
		c.met.leaseLost(opRelease)
		return refusedWrite("release", j)
	}
	return nil
}

// Rescue returns up to limit running jobs whose lease has expired by the
// database clock to the queue, in one guarded UPDATE: the statement itself
// requires state = 'running' AND expires_at <= now() on every row it
// changes (rows being written concurrently are skipped), so it can never
// undo a completion or take a job whose lease was just extended. The expired
// attempt stays counted; a job whose last attempt expired becomes dead. It
// returns how many jobs it made available again (requeued) and how many
// became dead. limit must lie in [1, 10000].
func (c *Claimer) Rescue(ctx context.Context, limit int) (requeued, dead int64, err error) {
	if limit < 1 || limit > maxBatch {
		return 0, 0, invalid("rescue limit %d is outside [1, %d]", limit, maxBatch)
	}
	if err := c.db.QueryRow(ctx, c.sql.rescue, c.queueArgs(limit)...).Scan(&requeued, &dead); err != nil {
		return 0, 0, c.explain("rescue", err)
	}
	c.met.rescued(requeued, dead)
	if requeued+dead > 0 {
		c.cfg.logger.Warn("claim: rescued jobs whose lease expired", "requeued", requeued, "dead", dead)
	}
	return requeued, dead, nil
}
