package claim

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/listen"
	"github.com/pgfence/pgfence/internal/pgdb"
)

// Handler does one job. Its context ends when the job's lease is lost
// (context.Cause is then a *pgfence.LeaseLostError), when the runner's shutdown grace
// period ends (ErrShutdown), or when the job ends. Returning nil completes the
// job; an error fails it (retried after the backoff, dead after its last
// attempt); a panic counts as an error. If the job's lease was lost before
// the handler returned (its context ended with a *pgfence.LeaseLostError), returning
// nil does not complete the job: the runner writes nothing, reports the
// outcome LeaseLost (counted in pgfence.job.lease_lost, op complete), and
// Rescue takes the job back once its lease expires in the database, so it
// runs again (at least once). Make the job's effects fenced or
// idempotent: a handler may run again after a lost lease, and the database,
// not the handler, decides which attempt's completion counts (see
// Claimer.CompleteTx for effects in the same database).
type Handler func(ctx context.Context, job *Job) error

// TxHandler does one job inside a transaction that the runner opens on the
// claimer's pool. When it returns nil, the runner completes the job in the same
// transaction (Claimer.CompleteTx) and commits: the job's effects in this
// database and its completion count together or not at all. If the lease was
// lost meanwhile, the completion is refused and the runner rolls the effects
// back (outcome LeaseLost). When it returns an error, the transaction rolls
// back and the job fails as with a Handler.
type TxHandler func(ctx context.Context, tx pgx.Tx, job *Job) error

// Outcome is what the runner did with a job after its handler returned, in
// words.
type Outcome string

const (
	// Completed: the handler returned nil and the completion was accepted
	// and is durable.
	Completed Outcome = "completed"
	// Failed: the handler returned an error (or panicked) and the failure
	// was recorded; the job retries later or is dead.
	Failed Outcome = "failed"
	// Released: shutdown interrupted the handler; the job went back to the
	// queue without counting the attempt.
	Released Outcome = "released"
	// LeaseLost: the database refused the completion, failure or release
	// (the job was rescued or claimed again meanwhile), or the handler
	// returned nil after its lease was lost (its context ended with a
	// *pgfence.LeaseLostError), so no completion was sent. This attempt does not
	// count.
	LeaseLost Outcome = "lease lost"
	// WriteError: the completion, failure or release could not be written,
	// and for a completion its outcome could not be settled by reading the
	// job back either (the database was unreachable within the write
	// timeout). The lease will expire and Rescue requeue the job, unless a
	// completion whose answer was lost did land.
	WriteError Outcome = "write error"
)

// Result reports one job's end to a result hook.
type Result struct {
	Outcome Outcome
	// HandlerErr is what the handler returned (nil on success).
	HandlerErr error
	// Err is the error of the final write, if any (a *pgfence.LeaseLostError for
	// LeaseLost).
	Err error
	// Fail is set when Outcome is Failed.
	Fail FailResult
}

type runnerConfig struct {
	workers      int
	batch        int // 0: workers
	ttl          time.Duration
	poll         time.Duration
	listen       string
	listenPool   *pgxpool.Pool // WithListen's; nil: the claimer's pool
	grace        time.Duration
	rescueEvery  time.Duration // 0: lease/2; <0: off
	writeTimeout time.Duration
	hook         func(*Job, Result)
}

// WithWorkers sets how many jobs run at once, each in its own goroutine.
// Default: 4. At most 1000.
func WithWorkers(n int) Option {
	return runnerOption("WithWorkers", func(c *runnerConfig) error {
		if n < 1 || n > 1000 {
			return invalid("workers %d is outside [1, 1000]", n)
		}
		c.workers = n
		return nil
	})
}

// WithBatchSize caps how many jobs one claim takes; the runner never claims
// more than it has idle workers, so no claimed job waits for a worker while
// its lease runs. Default: the number of workers.
func WithBatchSize(n int) Option {
	return runnerOption("WithBatchSize", func(c *runnerConfig) error {
		if n < 1 || n > maxBatch {
			return invalid("batch size %d is outside [1, %d]", n, maxBatch)
		}
		c.batch = n
		return nil
	})
}

// WithTTL sets each job's lease TTL. One renew statement per round extends
// the leases of all running jobs, each a third of the TTL after its last
// successful extension (or up to a sixth earlier, to share a round); a
// failed renewal is retried after min(TTL/12, 250ms) until the job's local
// deadline, as pglease does.
// Default: 30s. Within [10ms, 24h].
func WithTTL(d time.Duration) Option {
	return runnerOption("WithTTL", func(c *runnerConfig) error {
		if err := checkTTL(d); err != nil {
			return err
		}
		c.ttl = d
		return nil
	})
}

// WithPollInterval sets how long the runner waits before claiming again after
// it found fewer runnable jobs than idle workers. With WithListen it is the
// fallback for lost notifications and for jobs whose run_at came. Default: 1s.
func WithPollInterval(d time.Duration) Option {
	return runnerOption("WithPollInterval", func(c *runnerConfig) error {
		if d < time.Millisecond || d > time.Hour {
			return invalid("poll interval %v is outside [1ms, 1h]", d)
		}
		c.poll = d
		return nil
	})
}

// WithListen makes the runner LISTEN on channel (on one dedicated
// connection taken from the claimer's pool, or the listen pool's, for the
// length of Run) and claim as soon as a notification arrives; Enqueue with
// the same channel notifies it. Default: off, polling only. If the
// listening connection fails, the runner keeps polling and listens again
// after a jittered backoff (50ms, doubling up to 5s), then claims at once,
// since notifications meanwhile went unheard.
//
// LISTEN needs a server session of its own, which a transaction or
// statement pooler (PgBouncer's usual pool modes) does not give: behind one,
// give the listener a pool of its own that bypasses it, listen: one that
// reaches the same database directly (or through a session pooler).
// Claims, completions and Enqueue's NOTIFY still go through the claimer's
// pool. The listener holds one connection of it for the length of Run
// (MaxConns 1 suffices), and none of the claimer's pool then.
//
// Without a listen pool, the claimer's own pool serves. When the listener
// starts, Run checks what lies in front of PostgreSQL (the listen pool's as
// well): behind a transaction or statement pooler it sends no LISTEN (a
// LISTEN there stays behind on a pooled server session, and its
// notifications go to other clients or are dropped), logs a warning once
// per Run, counts pgfence.listen.disabled, and claims at each poll interval
// (WithPollInterval). More than one listen pool, or a nil one, is refused
// with pgfence.ErrInvalidInput.
func WithListen(channel string, listen ...*pgxpool.Pool) Option {
	return runnerOption("WithListen", func(c *runnerConfig) error {
		if err := checkIdent("notification channel", channel); err != nil {
			return err
		}
		switch {
		case len(listen) > 1:
			return invalid("WithListen takes at most one listen pool, got %d", len(listen))
		case len(listen) == 1 && listen[0] == nil:
			return invalid("nil listen pool: give WithListen a pool that connects directly to PostgreSQL, or none")
		case len(listen) == 1:
			c.listenPool = listen[0]
		}
		c.listen = channel
		return nil
	})
}

// WithShutdownGrace sets how long Run, once its context ends, lets in-flight
// jobs finish. After it, their contexts end with ErrShutdown, and jobs whose
// handler then returns an error are released back to the queue. Default: 10s.
func WithShutdownGrace(d time.Duration) Option {
	return runnerOption("WithShutdownGrace", func(c *runnerConfig) error {
		if d < 0 || d > time.Hour {
			return invalid("shutdown grace %v is outside [0, 1h]", d)
		}
		c.grace = d
		return nil
	})
}

// WithRescueInterval sets how often the runner runs Rescue for its table and
// queue; a negative interval turns it off (run Rescue elsewhere then).
// Default: half the TTL.
func WithRescueInterval(d time.Duration) Option {
	return runnerOption("WithRescueInterval", func(c *runnerConfig) error {
		if d == 0 || d > 24*time.Hour {
			return invalid("rescue interval %v must be non-zero and at most 24h (negative turns it off)", d)
		}
		c.rescueEvery = d
		return nil
	})
}

// WithResultHook calls f after each job's end, from a runner goroutine (the
// worker's, or for completions the one that writes them in batches), for
// metrics and tests. Default: none. f must not block for long.
func WithResultHook(f func(*Job, Result)) Option {
	return runnerOption("WithResultHook", func(c *runnerConfig) error {
		if f == nil {
			return invalid("nil result hook")
		}
		c.hook = f
		return nil
	})
}

// Runner runs a Handler (or a TxHandler) over the jobs a Claimer claims, with
// N workers, and spends the database sparingly: one claim statement takes as
// many jobs as there are idle workers; one goroutine renews the leases of all
// running jobs in one statement per round (a job's local deadline is a timer,
// not a goroutine); and the jobs whose handler returned nil are completed in
// one statement per batch, each row still matched on id, fence and state
// 'running', pipelined with the next claim in one transaction when one is due.
//
// Each job learns on its own whether its completion counted: [Completed] is
// reported only after the completion committed durably, LeaseLost when it did
// not count. A handler that returns nil after its lease was lost gets no
// completion, and Rescue takes the job back after its expiry. A completion
// whose answer was lost is sent again and read back by id and fence on
// another connection, within the write timeout; WriteError only when even
// that fails. Runner also rescues expired leases periodically, wakes on
// LISTEN/NOTIFY when asked to (polling stays the fallback), and on shutdown
// lets in-flight jobs finish within a grace period, releases the rest and
// writes the completions still queued. Every goroutine it starts has stopped
// when Run returns.
type Runner struct {
	c       *Claimer
	h       Handler
	txh     TxHandler
	cfg     runnerConfig
	running atomic.Bool
}

// NewTxRunner returns a runner whose handler runs in a transaction that
// also completes the job (see TxHandler). Start it with Run.
//
// Each worker holds one of the claimer's pool connections (its transaction)
// for the whole of its handler, while the renewals, the claims and the
// rescues need connections of their own from the same pool: the renewer
// and the claiming loop each send one statement at a time, and the rescue
// loop's short statement shares with them. So the pool's MaxConns must be at
// least workers + 2 (one for renewals, one for claims and rescues), and
// workers + 3 with WithListen, whose listener holds a connection for the
// length of Run (of its own pool with a listen pool: then workers + 2). A smaller pool would starve the renewals of connections
// while the handlers run, and every job longer than its lease would lose it;
// NewTxRunner refuses it with pgfence.ErrInvalidInput.
func NewTxRunner(c *Claimer, h TxHandler, opts ...Option) (*Runner, error) {
	if h == nil {
		return nil, invalid("nil handler")
	}
	rn, err := NewRunner(c, func(context.Context, *Job) error { return nil }, opts...)
	if err != nil {
		return nil, err
	}
	need, why := rn.cfg.workers+2, "one for renewals, one for claims"
	if rn.cfg.listen != "" && rn.cfg.listenPool == nil {
		need, why = need+1, why+", one held by WithListen's listener"
	}
	if have := int(c.pool.Config().MaxConns); have < need {
		return nil, invalid("the pool's MaxConns %d is too small for a transaction runner with %d workers: "+
			"each worker holds a connection for its handler's transaction, so set MaxConns to at least %d "+
			"(workers + %d: %s), or use fewer workers", have, rn.cfg.workers, need, need-rn.cfg.workers, why)
	}
	rn.h, rn.txh = nil, h
	return rn, nil
}

// NewRunner returns a runner (a worker pool). Start it with Run.
func NewRunner(c *Claimer, h Handler, opts ...Option) (*Runner, error) {
	if c == nil {
		return nil, invalid("nil claimer")
	}
	if h == nil {
		return nil, invalid("nil handler")
	}
	cfg := runnerConfig{workers: 4, ttl: 30 * time.Second, poll: time.Second, grace: 10 * time.Second, writeTimeout: 10 * time.Second}
	if err := apply(opts, settings{runner: &cfg}); err != nil {
		return nil, err
	}
	if cfg.batch == 0 {
		cfg.batch = cfg.workers
	}
	if cfg.rescueEvery == 0 {
		cfg.rescueEvery = cfg.ttl / 2
	}
	return &Runner{c: c, h: h, cfg: cfg}, nil
}

// Run claims and runs jobs until ctx ends, then shuts down gracefully: it
// stops claiming, lets in-flight jobs finish within the shutdown grace,
// releases those that do not, records the results still pending, and
// returns once every goroutine it started has stopped. It returns nil after
// a graceful shutdown. A Runner runs once at a time.
//
// How it spends the database: one claim statement takes as many jobs as
// there are idle workers; one goroutine renews every running job's
// lease in one statement per round; and the jobs whose handler returned nil
// are completed in one statement per batch (each job still matched on id +
// fence + state 'running'), sent in the same transaction as the next claim
// when one is due, so a worker is free for the next job while its last
// one's completion is written. A job is reported Completed only after its
// completion committed durably.
func (rn *Runner) Run(ctx context.Context) error {
	if !rn.running.CompareAndSwap(false, true) {
		return errors.New("claim: runner is already running")
	}
	defer rn.running.Store(false)

	jobsCtx, stopJobs := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopJobs(nil)
	slots := make(chan struct{}, rn.cfg.workers)
	for range rn.cfg.workers {
		slots <- struct{}{}
	}
	work := make(chan *Job, rn.cfg.workers)
	wake := make(chan struct{}, 1)
	r := &run{renew: newRenewer(rn.c, rn.cfg.ttl), completions: make(chan *Job, rn.cfg.workers)}

	var workers, background, completer, renewer sync.WaitGroup
	stopRenew := make(chan struct{})
	renewer.Go(func() { r.renew.run(stopRenew) })
	for range rn.cfg.workers {
		workers.Go(func() {
			for j := range work {
				rn.process(jobsCtx, r, j)
				slots <- struct{}{}
			}
		})
	}
	if rn.cfg.rescueEvery > 0 {
		background.Go(func() { rn.rescueLoop(ctx, wake) })
	}
	if rn.cfg.listen != "" {
		background.Go(func() { rn.listenLoop(ctx, wake) })
	}

	rn.fetchLoop(ctx, r, work, slots, wake)
	close(work)
	// From here on completions are written on their own.
	completer.Go(func() { rn.completeLoop(r) })

	done := make(chan struct{})
	go func() { workers.Wait(); close(done) }()
	t := time.NewTimer(rn.cfg.grace)
	select {
	case <-done:
		t.Stop()
	case <-t.C:
		stopJobs(ErrShutdown)
		<-done
	}
	// Every worker has stopped: the completions still queued are written
	// (the renewer keeps their leases meanwhile), then the renewer stops.
	close(r.completions)
	completer.Wait()
	close(stopRenew)
	renewer.Wait()
	background.Wait()
	return nil
}

// run is the state one Run shares between its goroutines.
type run struct {
	renew       *renewer
	completions chan *Job // handler returned nil: to be completed in a batch (by fetchLoop, then completeLoop)
}

// fetchLoop is the runner's one writer while it runs: it claims jobs for idle
// workers and writes the completions that workers queue, each round in one
// round trip. Completions queued when a claim is due ride in the claim's
// transaction (one durable commit for both); when no claim is due (no idle
// worker, or waiting for the poll interval after a short claim) they go
// alone. When ctx ends it returns, and completeLoop takes the completions
// over.
func (rn *Runner) fetchLoop(ctx context.Context, r *run, work chan<- *Job, slots chan struct{}, wake <-chan struct{}) {
	poll := time.NewTimer(time.Hour)
	poll.Stop()
	gather := time.NewTimer(time.Hour)
	gather.Stop()
	var window time.Duration // half the last claim's round trip
	resting := false         // after a short claim, until the poll interval or a wake-up
	for {
		var slotsC chan struct{}
		var pollC <-chan time.Time
		var wakeC <-chan struct{}
		if resting {
			pollC, wakeC = poll.C, wake
		} else {
			slotsC = slots
		}
		n := 0
		var done []*Job
		select {
		case <-ctx.Done():
			return
		case <-pollC:
			resting = false
			continue
		case <-wakeC:
			poll.Stop()
			resting = false
			continue
		case <-slotsC:
			n = 1
		case j := <-r.completions:
			done = append(done, j)
		}
		if !resting {
			n = rn.gatherSlots(n, slots, gather, window)
		}
		done = drain(done, r.completions)
		if n == 0 {
			rn.completeBatch(r, done)
			continue
		}
		sent := time.Now()
		jobs, err := rn.claimFor(r, n, done)
		window = min(time.Since(sent)/2, rn.cfg.poll)
		if err != nil {
			rn.c.cfg.logger.Warn("claim: claiming failed; retrying after the poll interval", "err", err)
		}
		for _, j := range jobs {
			work <- j // n workers are idle: this does not wait long
		}
		for range n - len(jobs) {
			slots <- struct{}{}
		}
		if len(jobs) < n || err != nil {
			resting = true
			poll.Reset(rn.cfg.poll)
		}
	}
}

// gatherSlots takes every idle worker (n already taken), and waits up to
// window (half a claim's round trip) for more to come free: workers that
// finish together then share one claim instead of each paying for a claim
// of its own, and a job never waits for more than that.
func (rn *Runner) gatherSlots(n int, slots chan struct{}, gather *time.Timer, window time.Duration) int {
	for n < rn.cfg.batch {
		select {
		case <-slots:
			n++
			continue
		default:
		}
		if n == 0 || window <= 0 {
			return n
		}
		gather.Reset(window)
		select {
		case <-slots:
			n++
			gather.Stop() // since Go 1.23 a stopped timer delivers nothing stale
		case <-gather.C:
			return n
		}
	}
	return n
}

// drain appends the completions queued now, up to maxCompleteBatch.
func drain(done []*Job, completions <-chan *Job) []*Job {
	for len(done) < maxCompleteBatch {
		select {
		case j, ok := <-completions:
			if !ok {
				return done
			}
			done = append(done, j)
		default:
			return done
		}
	}
	return done
}

// claimFor claims up to n jobs and completes done in the same transaction,
// reporting each completion once it is settled. The claim's answer must not
// be lost to shutdown (rows it claimed would wait for Rescue), so it runs on
// its own timeout.
func (rn *Runner) claimFor(r *run, n int, done []*Job) ([]*Job, error) {
	ctx, cancel := context.WithTimeout(context.Background(), rn.cfg.writeTimeout)
	defer cancel()
	if len(done) == 0 {
		return rn.c.Claim(ctx, n, rn.cfg.ttl)
	}
	if !rn.c.pipeline {
		// Behind a transaction pooler with named statements: the
		// completions go alone, then the claim.
		rn.completeBatch(r, done)
		return rn.c.Claim(ctx, n, rn.cfg.ttl)
	}
	res, jobs, err := rn.c.completeAndClaim(ctx, done, n, rn.cfg.ttl)
	if ambiguous(err) {
		// Whether the completions committed is unknown: settle them.
		rn.settleBatch(r, done, err)
		return nil, err
	}
	if err != nil {
		// Refused by the server (the batch's one transaction rolled
		// back) or never sent: nothing of it landed.
		rn.reportBatch(r, done, nil, err)
		return nil, err
	}
	rn.reportBatch(r, done, res, nil)
	return jobs, nil
}

// process runs one job's handler and records its result: a completion goes
// to the completer (the worker is then free), anything else is written here.
func (rn *Runner) process(base context.Context, r *run, j *Job) {
	jctx, cancel := context.WithCancelCause(base)
	r.renew.add(j, cancel)
	herr := rn.call(jctx, j)
	cause := context.Cause(jctx)
	cancel(nil)

	if herr == nil && rn.txh == nil {
		if errors.Is(cause, pgfence.ErrLeaseLost) {
			// The lease was lost (local deadline passed, or a renewal
			// found the job gone) before the handler returned: its work
			// may overlap another attempt's, so it is not completed.
			// Rescue takes the job back once its lease expires.
			r.renew.remove(j)
			rn.c.met.leaseLost(opComplete)
			rn.report(j, Result{Outcome: LeaseLost, Err: cause})
			return
		}
		// The renewer keeps the lease until the completion is written.
		r.completions <- j
		return
	}
	defer r.renew.remove(j)
	wctx, wcancel := context.WithTimeout(context.Background(), rn.cfg.writeTimeout)
	defer wcancel()
	res := Result{HandlerErr: herr}
	var completed *completedInTx
	switch {
	case errors.As(herr, &completed):
		// A TxHandler's transaction completed the job, or tried to.
		res.HandlerErr = nil
		res.Outcome, res.Err = completed.outcome, completed.err
	case errors.Is(cause, ErrShutdown):
		res.Outcome, res.Err = Released, rn.c.Release(wctx, j)
	default:
		res.Outcome = Failed
		res.Fail, res.Err = rn.c.Fail(wctx, j, herr)
	}
	rn.report(j, res)
}

// report classifies a result's write error, logs it and calls the hook.
func (rn *Runner) report(j *Job, res Result) {
	if res.Err != nil {
		if errors.Is(res.Err, pgfence.ErrLeaseLost) {
			res.Outcome = LeaseLost
			rn.c.cfg.logger.Warn("claim: job result refused: lease lost", "job", j.ID, "fence", j.Fence, "err", res.Err)
		} else {
			res.Outcome = WriteError
			rn.c.cfg.logger.Error("claim: could not record job result; its lease will expire", "job", j.ID, "err", res.Err)
		}
	}
	if rn.cfg.hook != nil {
		rn.cfg.hook(j, res)
	}
}

// maxCompleteBatch bounds one completion statement.
const maxCompleteBatch = 1000

// completeLoop writes the completions still queued once fetchLoop has
// stopped (shutdown), as many per statement as are queued, until the queue
// is closed and drained.
func (rn *Runner) completeLoop(r *run) {
	for j := range r.completions {
		rn.completeBatch(r, drain([]*Job{j}, r.completions))
	}
}

// completeBatch completes jobs in one statement and reports each job's
// outcome. An answer lost on the way back is settled before anything is
// reported (see Claimer.settleMany), so Completed always means durably
// completed and LeaseLost always means refused.
func (rn *Runner) completeBatch(r *run, jobs []*Job) {
	ctx, cancel := context.WithTimeout(context.Background(), rn.cfg.writeTimeout)
	res, err := rn.c.completeMany(ctx, jobs)
	cancel()
	if ambiguous(err) {
		rn.settleBatch(r, jobs, err)
		return
	}
	rn.reportBatch(r, jobs, res, err)
}

// settleBatch settles completions whose outcome err left unknown.
func (rn *Runner) settleBatch(r *run, jobs []*Job, err error) {
	rn.c.cfg.logger.Warn("claim: completion answer lost; settling by reading the jobs back", "jobs", len(jobs), "err", err)
	ctx, cancel := context.WithTimeout(context.Background(), rn.cfg.writeTimeout)
	defer cancel()
	res, err := rn.c.settleMany(ctx, jobs)
	rn.reportBatch(r, jobs, res, err)
}

// reportBatch reports each job's completion: res[i] for job i, or err for
// all when err is not nil.
func (rn *Runner) reportBatch(r *run, jobs []*Job, res []error, err error) {
	for i, j := range jobs {
		r.renew.remove(j)
		out := Result{Outcome: Completed, Err: err}
		if err == nil {
			out.Err = res[i]
		}
		rn.c.met.batchCompleted(j, out.Err)
		rn.report(j, out)
	}
}

func (rn *Runner) call(ctx context.Context, j *Job) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("claim: handler panicked on job %d: %v\n%s", j.ID, r, debug.Stack())
		}
	}()
	if rn.txh != nil {
		return rn.callTx(ctx, j)
	}
	return rn.h(ctx, j)
}

// completedInTx carries a TxHandler's completion out of call, with the
// outcome it settled on.
type completedInTx struct {
	outcome Outcome
	err     error
}

func (c *completedInTx) Error() string { return "claim: completed in the handler's transaction" }

// callTx runs the TxHandler and, when it succeeds, completes the job in the
// same transaction and commits. A handler error is returned as is, with the
// transaction rolled back. Otherwise the outcome is settled here:
//
//   - the job's lease was lost while the handler ran (its context ended with
//     a *pgfence.LeaseLostError) and the handler returned nil anyway: the effects are
//     rolled back and the outcome is LeaseLost, without asking the database;
//   - the completion was refused: rolled back, LeaseLost;
//   - the commit's answer was lost (the connection broke after COMMIT was
//     sent): the row is read back by id + fence on another connection,
//     within the write timeout. Completed under this fence means the commit
//     landed (Completed); running under this fence means it did not, and
//     the attempt is recorded as failed (the effects are gone); anything
//     else means another claim has the job (LeaseLost). If even that cannot
//     be read, WriteError.
//
// The completion and the commit run on a context of their own, bounded by
// the write timeout: a handler that ran into the shutdown grace still gets
// its completion recorded.
func (rn *Runner) callTx(ctx context.Context, j *Job) error {
	tx, err := rn.c.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("claim: begin transaction for job %d: %w", j.ID, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := rn.txh(ctx, tx, j); err != nil {
		return err
	}
	if cause := context.Cause(ctx); errors.Is(cause, pgfence.ErrLeaseLost) {
		rn.c.met.leaseLost(opComplete)
		return &completedInTx{outcome: LeaseLost, err: cause}
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rn.cfg.writeTimeout)
	defer cancel()
	// Not CompleteTx: the completion is counted once the commit is known.
	if err := rn.c.complete(wctx, pgdb.Wrap(tx, ""), j); err != nil {
		return &completedInTx{outcome: Completed, err: err}
	}
	err = tx.Commit(wctx)
	if err == nil {
		rn.c.met.completed(j)
		return &completedInTx{outcome: Completed}
	}
	err = fmt.Errorf("claim: commit job %d: %w", j.ID, err)
	if !ambiguous(err) {
		return &completedInTx{outcome: Completed, err: err}
	}
	return rn.settleTx(j, err)
}

// settleTx reads back a job whose commit answer was lost; see callTx.
func (rn *Runner) settleTx(j *Job, commitErr error) error {
	rn.c.cfg.logger.Warn("claim: commit answer lost; reading the job back", "job", j.ID, "fence", j.Fence, "err", commitErr)
	ctx, cancel := context.WithTimeout(context.Background(), rn.cfg.writeTimeout)
	defer cancel()
	states, err := rn.c.readBack(ctx, rn.c.db, []*Job{j})
	switch {
	case err != nil:
		return &completedInTx{outcome: WriteError, err: fmt.Errorf("%w; reading the job back: %w", commitErr, err)}
	case states[attemptOf(j)] == "completed":
		rn.c.met.completed(j)
		return &completedInTx{outcome: Completed}
	case states[attemptOf(j)] == "running":
		// The commit did not land and the lease is still ours: the
		// attempt failed, its effects are gone.
		return commitErr
	}
	rn.c.met.leaseLost(opComplete)
	return &completedInTx{outcome: LeaseLost, err: refusedWrite("complete", j)}
}

func (rn *Runner) rescueLoop(ctx context.Context, wake chan<- struct{}) {
	t := time.NewTicker(rn.cfg.rescueEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for ctx.Err() == nil {
			requeued, dead, err := rn.c.Rescue(ctx, 1000)
			if err != nil {
				if ctx.Err() == nil {
					rn.c.cfg.logger.Warn("claim: rescue failed", "err", err)
				}
				break
			}
			if requeued > 0 {
				select {
				case wake <- struct{}{}:
				default:
				}
			}
			if requeued+dead < 1000 {
				break
			}
		}
	}
}

// listenLoop keeps a listener (internal/listen) on the runner's channel
// until ctx ends: each notification, and each (re)connection (notifications
// sent meanwhile went unheard), wakes fetchLoop, which claims at once.
func (rn *Runner) listenLoop(ctx context.Context, wake chan<- struct{}) {
	pool, pooled := rn.c.pool, "claim: the claimer's pool goes through a transaction or statement pooler (PgBouncer in "+
		"transaction mode, say), where LISTEN cannot work; no LISTEN is sent and the runner claims at each poll interval: "+
		"give WithListen a pool that connects directly to PostgreSQL"
	if rn.cfg.listenPool != nil {
		pool, pooled = rn.cfg.listenPool, "claim: the pool given to WithListen goes through a transaction or statement "+
			"pooler too, where LISTEN cannot work; no LISTEN is sent and the runner claims at each poll interval: "+
			"connect that pool directly to PostgreSQL (or through a session pooler)"
	}
	l := listen.New(pool, listen.Config{
		OnError: func(err error, retryIn time.Duration) {
			rn.c.cfg.logger.Warn("claim: listening for notifications failed; polling meanwhile",
				"channel", rn.cfg.listen, "err", err, "retry_in", retryIn)
		},
		OnPooled: func() {
			rn.c.cfg.logger.Warn(pooled, "channel", rn.cfg.listen, "poll_interval", rn.cfg.poll)
			rn.c.met.listenPooled()
		},
	})
	unsubscribe, err := l.Subscribe(rn.cfg.listen, "", wake)
	if err != nil { // WithListen checked the channel: never
		rn.c.cfg.logger.Error("claim: cannot listen; polling only", "channel", rn.cfg.listen, "err", err)
		return
	}
	defer unsubscribe()
	l.Run(ctx) // a fresh listener: never ErrRunning
}
