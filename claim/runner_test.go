package claim_test

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

func enqueueMany(t testing.TB, q pgfence.DBTX, queue string, n int, maxAttempts int32) {
	t.Helper()
	p := fencedb.EnqueueJobsParams{Queue: queue}
	for i := range n {
		p.Kinds = append(p.Kinds, "bulk")
		p.Payloads = append(p.Payloads, []byte(`{"i":`+json.Number(itoa(i)).String()+`}`))
		p.Priorities = append(p.Priorities, 0)
		p.MaxAttempts = append(p.MaxAttempts, maxAttempts)
	}
	got, err := fencedb.New(q).EnqueueJobs(context.Background(), p)
	if err != nil || got != int64(n) {
		t.Fatalf("enqueued %d of %d: %v", got, n, err)
	}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// 8 workers, 10,000 jobs, and an injector that keeps expiring the leases of
// random running jobs and rescuing them, as a stalled worker would see. The
// database must accept exactly one completion per job, lose none, and count
// every attempt.
func TestRunnerManyJobsWithLeaseLosses(t *testing.T) {
	const jobs, workers = 10000, 8
	ctx := context.Background()
	pool := pgtest.Pool(t, func(c *pgxpool.Config) { c.MaxConns = 20 })
	qn := queue("stress")
	c := newClaimer(t, pool, qn)
	enqueueMany(t, pool, qn, jobs, 1000)

	var mu sync.Mutex
	runs := map[int64]int{}
	completions := map[int64]int{}
	outcomes := map[claim.Outcome]int{}
	handler := func(ctx context.Context, j *claim.Job) error {
		mu.Lock()
		runs[j.ID]++
		mu.Unlock()
		if rand.IntN(50) == 0 { // a slow job: the injector's favourite target
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(20 * time.Millisecond):
			}
		}
		return nil
	}
	hook := func(j *claim.Job, r claim.Result) {
		mu.Lock()
		defer mu.Unlock()
		outcomes[r.Outcome]++
		if r.Outcome == claim.Completed {
			completions[j.ID]++
		}
	}
	p, err := claim.NewRunner(c, handler, claim.WithWorkers(workers), claim.WithBatchSize(workers),
		claim.WithTTL(5*time.Second), claim.WithPollInterval(5*time.Millisecond), claim.WithResultHook(hook))
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	runCtx, stop := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- p.Run(runCtx) }()

	var injected, rescued atomic.Int64
	injectDone := make(chan struct{})
	injectStop := make(chan struct{})
	var stopOnce sync.Once
	shutdown := func() error {
		var err error
		stopOnce.Do(func() {
			close(injectStop)
			<-injectDone
			stop()
			err = <-runDone
		})
		return err
	}
	defer shutdown() // also when the test fails half-way
	go func() {
		defer close(injectDone)
		for {
			select {
			case <-injectStop:
				return
			case <-time.After(time.Duration(rand.IntN(3000)) * time.Microsecond):
			}
			tag, err := pool.Exec(ctx, `UPDATE pgfence_jobs SET expires_at = now() - interval '1 millisecond'
				WHERE id = (SELECT id FROM pgfence_jobs WHERE queue = $1 AND state = 'running'
				             ORDER BY random() LIMIT 1)`, qn)
			if err != nil {
				t.Error(err)
				return
			}
			injected.Add(tag.RowsAffected())
			requeued, _, err := c.Rescue(ctx, 100)
			if err != nil {
				t.Error(err)
				return
			}
			rescued.Add(requeued)
		}
	}()

	var elapsed time.Duration
	pgtest.Step(t, "every job completes while the injector expires leases", func(t *testing.T) {
		// Polled with a deadline: the jobs finish when the runner gets to
		// them, which the test does not signal.
		deadline := time.Now().Add(100 * time.Second)
		for {
			var done int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM pgfence_jobs WHERE queue = $1 AND state = 'completed'`, qn).Scan(&done); err != nil {
				t.Fatal(err)
			}
			if done == jobs {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("only %d of %d jobs completed in time", done, jobs)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err := shutdown(); err != nil {
			t.Fatal(err)
		}
		elapsed = time.Since(start)
	})

	var sumAttempts int64
	pgtest.Step(t, "no job is lost or left unfinished", func(t *testing.T) {
		var n, notCompleted int64
		pool.QueryRow(ctx, `SELECT count(*), sum(attempt), count(*) FILTER (WHERE state <> 'completed')
			FROM pgfence_jobs WHERE queue = $1`, qn).Scan(&n, &sumAttempts, &notCompleted)
		if n != jobs || notCompleted != 0 {
			t.Fatalf("%d jobs, %d not completed", n, notCompleted)
		}
	})
	// The runner has stopped: the hook and handler no longer write these maps.
	mu.Lock()
	defer mu.Unlock()
	pgtest.Step(t, "exactly one accepted completion per job", func(t *testing.T) {
		if len(completions) != jobs {
			t.Fatalf("%d jobs had an accepted completion, want %d", len(completions), jobs)
		}
		for id, k := range completions {
			if k != 1 {
				t.Fatalf("job %d completed %d times", id, k)
			}
		}
	})
	var totalRuns int64
	pgtest.Step(t, "every handler run was one claim and one counted attempt", func(t *testing.T) {
		rows, err := pool.Query(ctx, `SELECT id, attempt FROM pgfence_jobs WHERE queue = $1`, qn)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id int64
			var attempt int
			rows.Scan(&id, &attempt)
			if runs[id] != attempt {
				t.Fatalf("job %d: %d handler runs, attempt column %d", id, runs[id], attempt)
			}
			totalRuns += int64(attempt)
		}
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
	})
	pgtest.Step(t, "each extra attempt came from a rescue whose worker was refused", func(t *testing.T) {
		if totalRuns != sumAttempts || sumAttempts-jobs < rescued.Load() || int64(outcomes[claim.LeaseLost]) != sumAttempts-jobs {
			t.Fatalf("attempts %d, runs %d, rescued by the injector %d, outcomes %v", sumAttempts, totalRuns, rescued.Load(), outcomes)
		}
		if injected.Load() == 0 || rescued.Load() == 0 || outcomes[claim.LeaseLost] == 0 {
			t.Fatalf("no lease losses were exercised: injected %d, rescued %d, outcomes %v", injected.Load(), rescued.Load(), outcomes)
		}
	})
	t.Logf("%d jobs, %d workers in %v (%.0f jobs/s): %d leases expired by the injector, %d rescued, %d attempts in all, outcomes %v",
		jobs, workers, elapsed.Round(time.Millisecond), float64(jobs)/elapsed.Seconds(), injected.Load(), rescued.Load(), sumAttempts, outcomes)
}

func TestRunnerLeaseLossEndsJobContext(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	qn := queue("loss")
	c := newClaimer(t, pool, qn)
	other := newClaimer(t, pool, qn, claim.WithOwner("thief"))
	id := enqueue(t, pool, claim.NewJob{Queue: qn})

	started := make(chan *claim.Job, 1)
	causes := make(chan error, 1)
	results := make(chan claim.Result, 1)
	p, err := claim.NewRunner(c, func(ctx context.Context, j *claim.Job) error {
		started <- j
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return context.Cause(ctx)
	}, claim.WithWorkers(1), claim.WithTTL(600*time.Millisecond), claim.WithRescueInterval(-1),
		claim.WithResultHook(func(_ *claim.Job, r claim.Result) { results <- r }))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- p.Run(runCtx) }()
	defer func() { stop(); <-runDone }()

	var thief *claim.Job
	pgtest.Step(t, "the job is rescued and claimed by another worker", func(t *testing.T) {
		j := <-started
		// The worker stalls (as far as the database can tell): its lease
		// expires, the job is rescued and claimed by another worker.
		expire(t, pool, id)
		if requeued, _, err := c.Rescue(ctx, 10); err != nil || requeued != 1 {
			t.Fatalf("rescue %d %v", requeued, err)
		}
		thief = claimOne(t, other, time.Minute)
		if thief.Fence <= j.Fence {
			t.Fatal("fence did not move")
		}
	})
	pgtest.Step(t, "the stale worker's context ends with a lost renewal", func(t *testing.T) {
		select {
		case cause := <-causes:
			var lle *pgfence.LeaseLostError
			if !errors.As(cause, &lle) || lle.Op != "renew" {
				t.Fatalf("job context cause %v, want a lost renewal", cause)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the job's context did not end on lease loss")
		}
		if r := <-results; r.Outcome != claim.LeaseLost {
			t.Fatalf("outcome %v (%v), want lease lost", r.Outcome, r.Err)
		}
	})
	pgtest.Step(t, "the stale worker leaves the row alone", func(t *testing.T) {
		if row := getJob(t, pool, id); row.state != "running" || *row.fence != thief.Fence {
			t.Fatalf("the stale worker touched the row: %+v", row)
		}
	})
}

func TestRunnerGracefulShutdown(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	qn := queue("shutdown")
	c := newClaimer(t, pool, qn)
	quick := enqueue(t, pool, claim.NewJob{Queue: qn, Payload: []byte(`"quick"`)})
	stuck := enqueue(t, pool, claim.NewJob{Queue: qn, Payload: []byte(`"stuck"`)})

	var started sync.WaitGroup
	started.Add(2)
	var mu sync.Mutex
	outcomes := map[int64]claim.Outcome{}
	p, err := claim.NewRunner(c, func(ctx context.Context, j *claim.Job) error {
		started.Done()
		if string(j.Payload) == `"quick"` {
			time.Sleep(200 * time.Millisecond) // the point: a job that finishes within the grace period
			return nil
		}
		<-ctx.Done() // never finishes by itself
		return context.Cause(ctx)
	}, claim.WithWorkers(2), claim.WithShutdownGrace(500*time.Millisecond),
		claim.WithResultHook(func(j *claim.Job, r claim.Result) {
			mu.Lock()
			outcomes[j.ID] = r.Outcome
			mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- p.Run(runCtx) }()
	started.Wait()
	stop()
	t0 := time.Now()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(t0); took < 400*time.Millisecond || took > 3*time.Second {
		t.Fatalf("shutdown took %v; want about the 500ms grace", took)
	}
	if outcomes[quick] != claim.Completed || outcomes[stuck] != claim.Released {
		t.Fatalf("outcomes %v", outcomes)
	}
	if r := getJob(t, pool, quick); r.state != "completed" {
		t.Fatalf("quick job %+v", r)
	}
	if r := getJob(t, pool, stuck); r.state != "available" || r.attempt != 0 {
		t.Fatalf("stuck job %+v: want released, attempt not counted", r)
	}
}

// runListening runs a two-worker runner on queue qn that listens on channel
// and polls once an hour, until the test ends; it returns the ids of the
// jobs it runs.
func runListening(t *testing.T, pool *pgxpool.Pool, qn, channel string) <-chan int64 {
	t.Helper()
	c := newClaimer(t, pool, qn)
	done := make(chan int64, 1)
	p, err := claim.NewRunner(c, func(ctx context.Context, j *claim.Job) error {
		done <- j.ID
		return nil
	}, claim.WithWorkers(2), claim.WithPollInterval(time.Hour), claim.WithListen(channel), claim.WithRescueInterval(-1))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- p.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-runDone })
	return done
}

// notifiedRuns enqueues a job that notifies channel and checks that the
// runner runs it at once.
func notifiedRuns(t *testing.T, pool *pgxpool.Pool, done <-chan int64, qn, channel string) {
	t.Helper()
	id := enqueue(t, pool, claim.NewJob{Queue: qn, Notify: channel})
	select {
	case got := <-done:
		if got != id {
			t.Fatalf("ran job %d, want %d", got, id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a notified job did not run; the poll interval is an hour")
	}
}

func TestRunnerListenNotify(t *testing.T) {
	pool := pgtest.Pool(t)
	qn := queue("listen")
	done := runListening(t, pool, qn, "pgfence test wake")
	// Let the first (empty) claim pass: the runner signals nothing, and a job
	// enqueued before it would run without any notification.
	time.Sleep(200 * time.Millisecond)
	for range 3 {
		notifiedRuns(t, pool, done, qn, "pgfence test wake")
	}
}

// After its listening backend is killed, the runner listens again (a new
// backend) and a notified job still runs at once.
func TestRunnerListenReconnects(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	qn := queue("relisten")
	channel := "pgfence test " + qn
	done := runListening(t, pool, qn, channel)
	// The listener's backend, found by its query.
	listener := func() int32 {
		var pid int32
		err := pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE query = $1 AND datname = current_database()
			  ORDER BY backend_start DESC LIMIT 1`, `LISTEN "`+channel+`"`).Scan(&pid)
		if err != nil {
			return 0
		}
		return pid
	}
	waitFor := func(what string, cond func() bool) {
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for range 2 {
		var old int32
		waitFor("no listening backend", func() bool { old = listener(); return old != 0 })
		if _, err := pool.Exec(ctx, "SELECT pg_terminate_backend($1)", old); err != nil {
			t.Fatal(err)
		}
		waitFor("the runner did not listen again", func() bool { pid := listener(); return pid != 0 && pid != old })
		notifiedRuns(t, pool, done, qn, channel)
	}
}

// TestOptionsPerConstructor: a Runner's option given to New, or a Claimer's
// given to NewRunner, is refused by name instead of being ignored.
func TestOptionsPerConstructor(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := newClaimer(t, pool, queue("optsfor"))
	h := func(context.Context, *claim.Job) error { return nil }
	if _, err := claim.New(ctx, pool, claim.WithWorkers(2)); !errors.Is(err, pgfence.ErrInvalidInput) ||
		!strings.Contains(err.Error(), "WithWorkers configures a Runner") {
		t.Errorf("New(WithWorkers): %v", err)
	}
	if _, err := claim.NewRunner(c, h, claim.WithQueue("x")); !errors.Is(err, pgfence.ErrInvalidInput) ||
		!strings.Contains(err.Error(), "WithQueue configures a Claimer") {
		t.Errorf("NewRunner(WithQueue): %v", err)
	}
}

func TestRunnerBadOptions(t *testing.T) {
	pool := pgtest.Pool(t)
	qn := queue("opts")
	c := newClaimer(t, pool, qn)
	h := func(context.Context, *claim.Job) error { return nil }
	for name, o := range map[string]claim.Option{
		"workers 0":        claim.WithWorkers(0),
		"batch 0":          claim.WithBatchSize(0),
		"batch huge":       claim.WithBatchSize(claim.MaxBatch + 1),
		"lease 0":          claim.WithTTL(0),
		"lease neg":        claim.WithTTL(-time.Second),
		"poll 0":           claim.WithPollInterval(0),
		"channel NUL":      claim.WithListen("a\x00b"),
		"channel \"\"":     claim.WithListen(""),
		"listen pool nil":  claim.WithListen("x", nil),
		"two listen pools": claim.WithListen("x", pool, pool),
	} {
		if _, err := claim.NewRunner(c, h, o); !errors.Is(err, pgfence.ErrInvalidInput) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := claim.NewRunner(c, h, claim.WithListen("x", pool)); err != nil {
		t.Errorf("WithListen with a listen pool: %v", err)
	}
	if _, err := claim.NewRunner(nil, h); !errors.Is(err, pgfence.ErrInvalidInput) {
		t.Error("nil claimer accepted")
	}
	if _, err := claim.NewRunner(c, nil); !errors.Is(err, pgfence.ErrInvalidInput) {
		t.Error("nil handler accepted")
	}
}

// When renewals cannot get through (here: the table is locked, as a slow or
// unreachable database would look), the job's context ends at the local
// deadline, before the lease could expire in the database.
func TestRunnerLocalDeadlineWhenRenewalsStall(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	qn := queue("stall")
	c := newClaimer(t, pool, qn)
	enqueue(t, pool, claim.NewJob{Queue: qn})
	started := make(chan time.Time, 1)
	causes := make(chan error, 1)
	p, err := claim.NewRunner(c, func(ctx context.Context, j *claim.Job) error {
		started <- time.Now()
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return context.Cause(ctx)
	}, claim.WithWorkers(1), claim.WithTTL(600*time.Millisecond), claim.WithRescueInterval(-1))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- p.Run(runCtx) }()
	defer func() { stop(); <-runDone }()

	t0 := <-started
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE pgfence_jobs IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	var cause error
	select {
	case cause = <-causes:
	case <-time.After(5 * time.Second):
		t.Fatal("the job's context did not end at its local deadline")
	}
	took := time.Since(t0)
	tx.Rollback(ctx)
	var lle *pgfence.LeaseLostError
	if !errors.As(cause, &lle) || lle.Cause != "local_deadline" {
		t.Fatalf("cause %v, want the local deadline", cause)
	}
	if took > 600*time.Millisecond {
		t.Fatalf("context ended %v after the claim; the lease is 600ms", took)
	}
}

// A TxHandler's effects commit with the job's completion, or not at all: the
// first job completes and its effect stays; the second is rescued and
// re-claimed while its handler runs, so its completion is refused and its
// effect is rolled back.
func TestTxRunnerEffectsCommitWithCompletion(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS txpool_effects; CREATE TABLE txpool_effects (job_id bigint PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	qn := queue("txpool")
	c := newClaimer(t, pool, qn)
	other := newClaimer(t, pool, qn, claim.WithOwner("thief"))
	good := enqueue(t, pool, claim.NewJob{Queue: qn, Priority: 1})
	stolen := enqueue(t, pool, claim.NewJob{Queue: qn, Priority: 2})

	results := make(chan claim.Result, 2)
	p, err := claim.NewTxRunner(c, func(ctx context.Context, tx pgx.Tx, j *claim.Job) error {
		if _, err := tx.Exec(ctx, `INSERT INTO txpool_effects VALUES ($1)`, j.ID); err != nil {
			return err
		}
		if j.ID == stolen {
			// The worker stalls: its lease expires, the job is rescued and
			// claimed by another worker before this one completes.
			expire(t, pool, stolen)
			if requeued, _, err := c.Rescue(ctx, 10); err != nil || requeued != 1 {
				t.Errorf("rescue %d %v", requeued, err)
			}
			claimOne(t, other, time.Minute)
		}
		return nil
	}, claim.WithWorkers(1), claim.WithBatchSize(1), claim.WithTTL(time.Minute), claim.WithRescueInterval(-1),
		claim.WithResultHook(func(_ *claim.Job, r claim.Result) { results <- r }))
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Step(t, "the first job completes, the stolen one's result is refused", func(t *testing.T) {
		runCtx, stop := context.WithCancel(ctx)
		runDone := make(chan error, 1)
		go func() { runDone <- p.Run(runCtx) }()
		first, second := <-results, <-results
		stop()
		if err := <-runDone; err != nil {
			t.Fatal(err)
		}
		if first.Outcome != claim.Completed || first.Err != nil {
			t.Fatalf("first job: %v (%v), want completed", first.Outcome, first.Err)
		}
		if second.Outcome != claim.LeaseLost {
			t.Fatalf("stolen job: %v (%v), want lease lost", second.Outcome, second.Err)
		}
	})
	pgtest.Step(t, "only the completed job's effect is committed", func(t *testing.T) {
		rows, _ := pool.Query(ctx, `SELECT job_id FROM txpool_effects ORDER BY job_id`)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) != 1 || ids[0] != good {
			t.Fatalf("effects %v, want only job %d's (the stolen job's effect must roll back)", ids, good)
		}
		if row := getJob(t, pool, good); row.state != "completed" {
			t.Fatalf("good job %+v", row)
		}
	})
}
