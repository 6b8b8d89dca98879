package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/pgfence/pgfence/claim"
)

// Job contenders, also the table's column order.
const (
	jClaim = "claim.Runner"
	jRiver = "River"
	jTx    = "one job per transaction"
)

var jobOrder = []string{jClaim, jRiver, jTx}

// jobPoolConns is the one pool every job contender runs on, in turn: enough
// for 32 workers plus each queue's fetcher, completer and listener, and
// within the server's default max_connections of 100.
const jobPoolConns = 48

// txJobsSchema is the plain queue of the one-job-per-transaction pattern.
const txJobsSchema = `CREATE TABLE tx_jobs (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  state       text        NOT NULL DEFAULT 'available',
  payload     jsonb       NOT NULL DEFAULT '{}',
  finished_at timestamptz
);
CREATE INDEX tx_jobs_available_idx ON tx_jobs (id) WHERE state = 'available'`

// jobRunner inserts n jobs (untimed), then runs them with the given number
// of workers and returns jobs completed per second.
type jobRunner func(ctx context.Context, p *pgxpool.Pool, workers, n int) (float64, error)

type jobRow struct {
	workers    int
	rates      map[string]sample
	status     map[string]string
	ratioRiver sample // claim.Runner / River, per round
	ratioTx    sample // claim.Runner / one job per transaction, per round
}

func runJobs(ctx context.Context, e *env, rep *report) error {
	p, err := e.pool(ctx, jobPoolConns)
	if err != nil {
		return err
	}
	defer p.Close()
	if err := setupJobTables(ctx, e, p); err != nil {
		return err
	}
	runners := map[string]jobRunner{jClaim: runClaimRunner, jRiver: runRiver, jTx: runTxPattern}
	for _, workers := range e.opts.workers {
		if workers > jobPoolConns-8 {
			return fmt.Errorf("-workers %d: at most %d (the job pool has %d connections)", workers, jobPoolConns-8, jobPoolConns)
		}
		row := &jobRow{workers: workers, rates: map[string]sample{}, status: map[string]string{}}
		for round := range e.opts.rounds {
			perRound := map[string]float64{}
			for _, name := range rotated(jobOrder, round) {
				if row.status[name] != "" {
					continue
				}
				r, err := runners[name](ctx, p, workers, e.opts.jobs)
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if err == nil {
					err = resetJobTables(ctx, e, p)
				}
				if err != nil {
					row.status[name] = "failed: " + err.Error()
					rep.failures++
					logf("jobs %s %d workers: %v", name, workers, err)
					continue
				}
				row.rates[name] = append(row.rates[name], r)
				perRound[name] = r
			}
			if a, b := perRound[jClaim], perRound[jRiver]; a > 0 && b > 0 {
				row.ratioRiver = append(row.ratioRiver, a/b)
			}
			if a, b := perRound[jClaim], perRound[jTx]; a > 0 && b > 0 {
				row.ratioTx = append(row.ratioTx, a/b)
			}
		}
		logf("jobs %d workers: claim.Runner %s, River %s, one per tx %s jobs/s", workers,
			row.rates[jClaim].rate(), row.rates[jRiver].rate(), row.rates[jTx].rate())
		rep.jobs = append(rep.jobs, row)
	}
	return nil
}

func setupJobTables(ctx context.Context, e *env, p *pgxpool.Pool) error {
	m, err := rivermigrate.New(riverpgxv5.New(p), nil)
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("River migrations: %w", err)
	}
	return e.exec(ctx, p, txJobsSchema)
}

// resetJobTables empties every job table between runs, so that no
// contender runs over another's dead rows.
func resetJobTables(ctx context.Context, e *env, p *pgxpool.Pool) error {
	return e.exec(ctx, p,
		"TRUNCATE pgfence_jobs, river_job, tx_jobs",
		"VACUUM ANALYZE pgfence_jobs", "VACUUM ANALYZE river_job", "VACUUM ANALYZE tx_jobs")
}

// insertPgfenceJobs puts n runnable no-op jobs in pgfence_jobs with one
// statement (setup, not timed; Claimer.Enqueue inserts one job per call).
func insertPgfenceJobs(ctx context.Context, p *pgxpool.Pool, queue string, n int) error {
	_, err := p.Exec(ctx, `INSERT INTO pgfence_jobs (queue, kind) SELECT $1, 'noop' FROM generate_series(1, $2)`, queue, n)
	return err
}

// runClaimRunner: claim.Runner with a no-op handler, polling every 50 ms like
// River's FetchPollInterval here.
func runClaimRunner(ctx context.Context, p *pgxpool.Pool, workers, n int) (float64, error) {
	if err := insertPgfenceJobs(ctx, p, "bench", n); err != nil {
		return 0, err
	}
	return claimRunnerRate(ctx, p, "bench", workers, n)
}

func claimRunnerRate(ctx context.Context, p *pgxpool.Pool, queue string, workers, n int) (float64, error) {
	c, err := claim.New(ctx, p, claim.WithQueue(queue), claim.WithOwner("bench"))
	if err != nil {
		return 0, err
	}
	var done atomic.Int64
	var bad atomic.Value
	all := make(chan struct{})
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pool, err := claim.NewRunner(c, func(context.Context, *claim.Job) error { return nil },
		claim.WithWorkers(workers), claim.WithPollInterval(50*time.Millisecond),
		claim.WithResultHook(func(j *claim.Job, r claim.Result) {
			if r.Outcome != claim.Completed {
				bad.CompareAndSwap(nil, fmt.Errorf("job %d: %v (%v %v)", j.ID, r.Outcome, r.HandlerErr, r.Err))
				cancel()
				return
			}
			if done.Add(1) == int64(n) {
				close(all)
			}
		}))
	if err != nil {
		return 0, err
	}
	start := time.Now()
	errc := make(chan error, 1)
	go func() { errc <- pool.Run(rctx) }()
	var elapsed time.Duration
	select {
	case <-all:
		elapsed = time.Since(start)
	case <-rctx.Done():
	}
	cancel()
	runErr := <-errc
	if e, _ := bad.Load().(error); e != nil {
		return 0, e
	}
	if elapsed == 0 {
		return 0, errors.Join(ctx.Err(), runErr, fmt.Errorf("stopped after %d of %d jobs", done.Load(), n))
	}
	return float64(n) / elapsed.Seconds(), runErr
}

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct{ river.WorkerDefaults[noopArgs] }

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// runRiver: River v0.51.2 with MaxWorkers = workers, FetchCooldown 1 ms and
// FetchPollInterval 50 ms, timed from Start to the n-th completion event.
func runRiver(ctx context.Context, p *pgxpool.Pool, workers, n int) (float64, error) {
	ws := river.NewWorkers()
	if err := river.AddWorkerSafely(ws, &noopWorker{}); err != nil {
		return 0, err
	}
	client, err := river.NewClient(riverpgxv5.New(p), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers:           ws,
		FetchCooldown:     time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return 0, err
	}
	params := make([]river.InsertManyParams, 0, 1000)
	for i := 0; i < n; i += cap(params) {
		params = params[:0]
		for j := i; j < min(n, i+cap(params)); j++ {
			params = append(params, river.InsertManyParams{Args: noopArgs{}})
		}
		if _, err := client.InsertManyFast(ctx, params); err != nil {
			return 0, fmt.Errorf("River insert: %w", err)
		}
	}
	events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{
		Kinds: []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed}, ChanSize: n + 100,
	})
	defer unsubscribe()
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return 0, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = client.Stop(sctx)
	}()
	for done := 0; done < n; {
		select {
		case ev := <-events:
			if ev.Kind != river.EventKindJobCompleted {
				return 0, fmt.Errorf("River job %d: %s", ev.Job.ID, ev.Kind)
			}
			done++
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(30 * time.Second):
			return 0, fmt.Errorf("River: no completion for 30 s after %d of %d jobs", done, n)
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// runTxPattern: each worker loops BEGIN; SELECT … FOR UPDATE SKIP LOCKED
// LIMIT 1; (no-op handler); UPDATE … completed; COMMIT, until the queue is
// empty.
func runTxPattern(ctx context.Context, p *pgxpool.Pool, workers, n int) (float64, error) {
	if _, err := p.Exec(ctx, `INSERT INTO tx_jobs (state) SELECT 'available' FROM generate_series(1, $1)`, n); err != nil {
		return 0, err
	}
	var done atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				more, err := txPatternOne(ctx, p)
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				if !more {
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return 0, firstErr
	}
	if got := done.Load(); got != int64(n) {
		return 0, errors.Join(ctx.Err(), fmt.Errorf("completed %d of %d jobs", got, n))
	}
	return float64(n) / elapsed.Seconds(), nil
}

func txPatternOne(ctx context.Context, p *pgxpool.Pool) (bool, error) {
	tx, err := p.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx)
	var id int64
	err = tx.QueryRow(ctx, `SELECT id FROM tx_jobs WHERE state = 'available' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED`).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	// The no-op handler runs here.
	if _, err := tx.Exec(ctx, `UPDATE tx_jobs SET state = 'completed', finished_at = now() WHERE id = $1`, id); err != nil {
		return false, err
	}
	return true, tx.Commit(ctx)
}
