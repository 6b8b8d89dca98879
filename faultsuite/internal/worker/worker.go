// Package worker is the process the fault suite runs several copies of: it
// takes leases and writes fenced rows under them, and claims and completes
// jobs, and prints every operation it invokes and every answer it gets, one
// JSON Record a line on stdout, so that the suite can check the history
// afterwards. It is started by the suite's test binary re-executing itself
// (see Main); it is not a program for users.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/pgguard"
	"github.com/pgfence/pgfence/pglease"
)

// Outcomes of an operation, as recorded.
const (
	OK        = "ok"        // the database answered: applied
	Refused   = "refused"   // the database answered: not applied (stale fence, lease lost)
	Ambiguous = "ambiguous" // sent, answer lost: may or may not have been applied
	Failed    = "failed"    // known not applied (never sent, or rolled back)
)

// Operations.
const (
	OpAcquire  = "acquire"  // take a lease on Key; returns its Fence
	OpWrite    = "write"    // write Val to row Key with Fence
	OpComplete = "complete" // complete job Job claimed with Fence, applying its effect
)

// Record is one line of a worker's history: the invocation (Phase "call")
// or the answer (Phase "return") of operation Seq of worker Worker. A call
// without a return was cut short (the worker was killed): its outcome is
// ambiguous.
type Record struct {
	Worker int    `json:"w"`
	Seq    int64  `json:"s"`
	Phase  string `json:"p"`
	Op     string `json:"op"`
	Key    string `json:"k,omitempty"`
	Job    int64  `json:"j,omitempty"`
	Val    int64  `json:"v,omitempty"`
	Fence  int64  `json:"f,omitempty"`
	Out    string `json:"o,omitempty"`
	Err    string `json:"e,omitempty"`
	T      int64  `json:"t"` // wall clock, Unix ns: one machine, one clock for every process
}

// Environment variables that configure a worker (Main reads them).
const (
	EnvID       = "FAULTSUITE_WORKER"          // the worker's number; set means "run as a worker"
	EnvDSN      = "FAULTSUITE_DSN"             // where to connect (through the fault proxy)
	EnvUnfenced = "FAULTSUITE_UNFENCED"        // "1": the control run, writes without the fence
	EnvKeys     = "FAULTSUITE_KEYS"            // number of rows/lease keys: k0..k(n-1)
	EnvTTL      = "FAULTSUITE_TTL"             // lease and job lease length
	EnvRows     = "FAULTSUITE_TABLE"           // the fenced table's name
	EnvEffects  = "FAULTSUITE_EFFECTS"         // the job effects table's name
	EnvWrites   = "FAULTSUITE_WRITES_PER_HOLD" // writes per lease held
)

// Table layouts the suite creates before starting workers.
const (
	// RowsDDL creates the fenced register rows (one per key).
	RowsDDL = `CREATE TABLE %s (k text PRIMARY KEY, val bigint NOT NULL DEFAULT 0, last_fence bigint NOT NULL DEFAULT 0)`
	// EffectsDDL creates the job effects table. No unique constraint on
	// job_id on purpose: a job applied twice must show, not be refused.
	EffectsDDL = `CREATE TABLE %s (job_id bigint NOT NULL, fence bigint NOT NULL, worker int NOT NULL)`
)

type worker struct {
	id       int
	unfenced bool
	keys     int
	ttl      time.Duration
	writes   int
	rows     string
	effects  string
	pool     *pgxpool.Pool
	guard    *pgguard.Guard
	leases   *pglease.Client
	claimer  *claim.Claimer
	seq      atomic.Int64
	outMu    sync.Mutex
	out      *json.Encoder
}

// Main runs a worker configured by the environment until SIGTERM or SIGINT
// and returns the process's exit code.
func Main() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	w, err := setup(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	defer w.pool.Close()
	defer w.leases.Close()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); w.leaseLoop(ctx) }()
	go func() { defer wg.Done(); w.jobLoop(ctx) }()
	wg.Wait()
	return 0
}

func setup(ctx context.Context) (*worker, error) {
	w := &worker{unfenced: os.Getenv(EnvUnfenced) == "1", rows: os.Getenv(EnvRows),
		effects: os.Getenv(EnvEffects), out: json.NewEncoder(os.Stdout)}
	var err error
	if w.id, err = strconv.Atoi(os.Getenv(EnvID)); err != nil {
		return nil, fmt.Errorf("%s: %v", EnvID, err)
	}
	if w.keys, err = strconv.Atoi(os.Getenv(EnvKeys)); err != nil || w.keys < 1 {
		return nil, fmt.Errorf("%s: %q", EnvKeys, os.Getenv(EnvKeys))
	}
	if w.writes, err = strconv.Atoi(os.Getenv(EnvWrites)); err != nil || w.writes < 1 {
		return nil, fmt.Errorf("%s: %q", EnvWrites, os.Getenv(EnvWrites))
	}
	if w.ttl, err = time.ParseDuration(os.Getenv(EnvTTL)); err != nil {
		return nil, fmt.Errorf("%s: %v", EnvTTL, err)
	}
	cfg, err := pgxpool.ParseConfig(os.Getenv(EnvDSN))
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	cfg.ConnConfig.RuntimeParams["application_name"] = fmt.Sprintf("fsworker-%d", w.id)
	if w.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, err
	}
	label := fmt.Sprintf("fsworker-%d", w.id)
	if w.leases, err = pglease.New(w.pool, pglease.WithOwner(label), pglease.WithRenewInterval(w.ttl/4)); err != nil {
		return nil, err
	}
	if w.claimer, err = claim.New(ctx, w.pool, claim.WithOwner(label)); err != nil {
		return nil, err
	}
	// The Guard's catalog lookup needs the database; the injector may be
	// cutting connections already, so try for a while.
	for try := 0; ; try++ {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		w.guard, err = pgguard.NewGuard(lctx, w.pool, pgguard.Table{Name: w.rows, KeyColumn: "k"})
		cancel()
		if err == nil || try == 50 || ctx.Err() != nil {
			return w, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (w *worker) emit(r Record) {
	r.Worker, r.T = w.id, time.Now().UnixNano()
	w.outMu.Lock()
	defer w.outMu.Unlock()
	w.out.Encode(r) // stdout is unbuffered: the line is out before the next operation
}

// call records an invocation and returns a function that records its answer.
func (w *worker) call(r Record) func(out string, err error, fence int64) {
	r.Seq, r.Phase = w.seq.Add(1), "call"
	w.emit(r)
	return func(out string, err error, fence int64) {
		r.Phase, r.Out, r.Err = "return", out, ""
		if fence != 0 {
			r.Fence = fence
		}
		if err != nil {
			r.Err = err.Error()
		}
		w.emit(r)
	}
}

// leaseLoop takes a lease on a random key and writes the row several times
// with its fence, ignoring the lease's own end on purpose: a process paused
// between its check and its write behaves exactly so, and the fence alone
// must stop its writes.
func (w *worker) leaseLoop(ctx context.Context) {
	var val int64
	for ctx.Err() == nil {
		key := fmt.Sprintf("k%d", rand.IntN(w.keys))
		l, ok := w.acquire(ctx, key)
		if !ok {
			sleep(ctx, 20*time.Millisecond)
			continue
		}
		for i := 0; i < w.writes && ctx.Err() == nil; i++ {
			val++
			w.write(ctx, key, int64(w.id)<<40|val, l.Fence())
			sleep(ctx, 15*time.Millisecond)
		}
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		l.Release(rctx)
		cancel()
	}
}

func (w *worker) acquire(ctx context.Context, key string) (*pglease.Lease, bool) {
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	done := w.call(Record{Op: OpAcquire, Key: key})
	l, err := w.leases.TryAcquire(actx, key, w.ttl)
	switch {
	case err == nil:
		done(OK, nil, l.Fence())
		return l, true
	case errors.Is(err, pgfence.ErrNotAcquired):
		done(Refused, err, 0)
	case errors.Is(err, pglease.ErrAmbiguous) || !pgconn.SafeToRetry(err):
		done(Ambiguous, err, 0)
	default:
		done(Failed, err, 0)
	}
	return nil, false
}

func (w *worker) write(ctx context.Context, key string, val, fence int64) {
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	done := w.call(Record{Op: OpWrite, Key: key, Val: val, Fence: fence})
	var err error
	if w.unfenced {
		var tag pgconn.CommandTag
		tag, err = w.pool.Exec(wctx, fmt.Sprintf(`UPDATE %s SET val = $1, last_fence = $2 WHERE k = $3`,
			pgx.Identifier{w.rows}.Sanitize()), val, fence, key)
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("%d rows", tag.RowsAffected())
		}
	} else {
		err = w.guard.Update(wctx, w.pool, key, fence, pgguard.Values{"val": val})
	}
	done(outcome(err, pgguard.ErrStaleFence), err, 0)
}

// outcome classifies a write's error: nil is ok, refusal is refused, an
// error raised before anything was sent is failed, anything else may have
// been applied.
func outcome(err, refusal error) string {
	switch {
	case err == nil:
		return OK
	case errors.Is(err, refusal):
		return Refused
	case pgconn.SafeToRetry(err):
		return Failed
	default:
		// An ERROR answer means the statement rolled back. A FATAL one (a
		// terminated backend) may come after the statement's own answer,
		// around its commit: unknown.
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Severity == "ERROR" {
			return Failed
		}
		return Ambiguous
	}
}

// jobLoop claims one job at a time, works a little, and applies its effect
// and completion in one transaction. In the control run the completion is
// an unfenced UPDATE by id.
func (w *worker) jobLoop(ctx context.Context) {
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		jobs, err := w.claimer.Claim(cctx, 1, w.ttl)
		cancel()
		if err != nil || len(jobs) == 0 {
			sleep(ctx, 50*time.Millisecond)
			continue
		}
		sleep(ctx, 30*time.Millisecond) // the work
		w.complete(ctx, jobs[0])
	}
}

func (w *worker) complete(ctx context.Context, j *claim.Job) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	done := w.call(Record{Op: OpComplete, Job: j.ID, Fence: j.Fence})
	tx, err := w.pool.Begin(cctx)
	if err != nil {
		done(Failed, fmt.Errorf("begin: %w", err), 0)
		return
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(cctx, fmt.Sprintf(`INSERT INTO %s (job_id, fence, worker) VALUES ($1, $2, $3)`,
		pgx.Identifier{w.effects}.Sanitize()), j.ID, j.Fence, w.id); err != nil {
		done(Failed, fmt.Errorf("effect: %w", err), 0) // no COMMIT is sent: the effect rolls back
		return
	}
	if w.unfenced {
		_, err = tx.Exec(cctx, `UPDATE pgfence_jobs SET state = 'completed', finished_at = now() WHERE id = $1`, j.ID)
	} else {
		err = w.claimer.CompleteTx(cctx, tx, j)
	}
	if err != nil {
		if errors.Is(err, pgfence.ErrLeaseLost) {
			done(Refused, err, 0)
		} else {
			done(Failed, fmt.Errorf("complete: %w", err), 0) // no COMMIT is sent
		}
		return
	}
	// Any error from Commit counts as ambiguous, even one pgx calls safe
	// to retry: a soak once saw a commit reported as "conn closed" (safe to
	// retry) whose effect had landed. Which step reported it was not yet
	// recorded then; now every message says.
	if err := tx.Commit(cctx); err != nil {
		done(Ambiguous, fmt.Errorf("commit: %w", err), 0)
		return
	}
	done(OK, nil, 0)
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
