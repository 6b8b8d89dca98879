package metricstest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/internal/testsupport/otelxtest"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// Jobs claimed, completed, failed, rescued and refused for a lost lease,
// the queue's depth by state and the age of its oldest runnable job.
func TestMetricsJobs(t *testing.T) {
	ctx := context.Background()
	r := otelxtest.New(t)
	pool := pgtest.Pool(t)
	qn := queue("metrics")
	qa := attribute.String("queue", qn)
	state := func(s string) attribute.KeyValue { return attribute.String("state", s) }
	outcome := func(s string) attribute.KeyValue { return attribute.String("outcome", s) }
	c := newClaimer(t, pool, qn, claim.WithMeterProvider(r.Provider), claim.WithQueueStatsInterval(time.Millisecond),
		claim.WithRetryBackoff(func(int) time.Duration { return time.Hour }))

	ids := []int64{
		enqueue(t, pool, claim.NewJob{Queue: qn}),
		enqueue(t, pool, claim.NewJob{Queue: qn, MaxAttempts: 1}),
		enqueue(t, pool, claim.NewJob{Queue: qn}),
		enqueue(t, pool, claim.NewJob{Queue: qn}),
	}
	if _, err := pool.Exec(ctx, `UPDATE pgfence_jobs SET run_at = now() - interval '1 hour' WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	s := r.Collect()
	if got := s.Value("pgfence.job.queue.depth", qa, state("available")); got != 4 {
		t.Errorf("available = %v, want 4", got)
	}
	if age := s.Value("pgfence.job.oldest_runnable.age", qa); age < 3600 || age > 3700 {
		t.Errorf("oldest runnable age = %v s, want about an hour", age)
	}

	jobs, err := c.Claim(ctx, 4, time.Minute)
	if err != nil || len(jobs) != 4 {
		t.Fatalf("claim: %d jobs, %v", len(jobs), err)
	}
	byID := map[int64]*claim.Job{}
	for _, j := range jobs {
		byID[j.ID] = j
	}
	if err := c.Complete(ctx, byID[ids[0]]); err != nil {
		t.Fatal(err)
	}
	// Completed again under the same fence (a retry after a lost answer
	// looks the same): no error, and still one completion in the metric.
	if err := c.Complete(ctx, byID[ids[0]]); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Fail(ctx, byID[ids[1]], errors.New("boom")); err != nil || !res.Dead {
		t.Fatalf("fail on the last attempt: %+v %v", res, err)
	}
	if res, err := c.Fail(ctx, byID[ids[2]], errors.New("boom")); err != nil || res.Dead {
		t.Fatalf("fail with attempts left: %+v %v", res, err)
	}
	expire(t, pool, ids[3])
	if requeued, _, err := c.Rescue(ctx, 10); err != nil || requeued != 1 {
		t.Fatalf("rescue: %d %v", requeued, err)
	}
	if err := c.Complete(ctx, byID[ids[3]]); !errors.Is(err, pgfence.ErrLeaseLost) {
		t.Fatalf("completion after a rescue: %v", err)
	}
	if err := c.Release(ctx, byID[ids[3]]); !errors.Is(err, pgfence.ErrLeaseLost) {
		t.Fatalf("release after a rescue: %v", err)
	}
	if _, err := c.Claim(ctx, 1, time.Minute); err != nil { // ids[3] again: running
		t.Fatal(err)
	}

	s = r.Collect()
	units := map[string]string{
		"pgfence.job.claimed": "{job}", "pgfence.job.completed": "{job}", "pgfence.job.failed": "{job}",
		"pgfence.job.rescued": "{job}", "pgfence.job.lease_lost": "{job}", "pgfence.job.queue.depth": "{job}",
		"pgfence.job.oldest_runnable.age": "s", "pgfence.db.pool.connections": "{connection}",
		"pgfence.db.pool.acquire.wait": "s",
	}
	for name, unit := range units {
		if s.Unit(name) != unit {
			t.Errorf("%s: unit %q, want %q (collected: %v)", name, s.Unit(name), unit, s.Has(name))
		}
	}
	for _, w := range []struct {
		name  string
		attrs []attribute.KeyValue
		want  float64
	}{
		{"pgfence.job.claimed", nil, 5},
		{"pgfence.job.completed", nil, 1},
		{"pgfence.job.failed", []attribute.KeyValue{outcome("dead")}, 1},
		{"pgfence.job.failed", []attribute.KeyValue{outcome("retry")}, 1},
		{"pgfence.job.rescued", []attribute.KeyValue{outcome("requeued")}, 1},
		{"pgfence.job.rescued", []attribute.KeyValue{outcome("dead")}, 0},
		{"pgfence.job.lease_lost", []attribute.KeyValue{attribute.String("op", "complete")}, 1},
		{"pgfence.job.lease_lost", []attribute.KeyValue{attribute.String("op", "release")}, 1},
		{"pgfence.job.queue.depth", []attribute.KeyValue{state("available")}, 1}, // the retry, not runnable yet
		{"pgfence.job.queue.depth", []attribute.KeyValue{state("running")}, 1},
		{"pgfence.job.oldest_runnable.age", nil, 0},
	} {
		if got := s.Value(w.name, append(w.attrs, qa)...); got != w.want {
			t.Errorf("%s %v = %v, want %v", w.name, w.attrs, got, w.want)
		}
	}
	if got := s.Value("pgfence.db.pool.acquires"); got < 1 {
		t.Errorf("pool acquires = %v", got)
	}
}

// The queue-depth query runs at most once per interval, however often the
// reader collects.
func TestMetricsQueueStatsCached(t *testing.T) {
	r := otelxtest.New(t)
	pool := pgtest.Pool(t)
	qn := queue("cached")
	qa := attribute.String("queue", qn)
	avail := attribute.String("state", "available")
	newClaimer(t, pool, qn, claim.WithMeterProvider(r.Provider), claim.WithQueueStatsInterval(time.Hour))
	enqueue(t, pool, claim.NewJob{Queue: qn})
	// Under load the first query may miss its 2 s bound (a gap, retried a
	// second later); the cache starts with the first answer.
	deadline := time.Now().Add(10 * time.Second)
	for got := r.Collect().Value("pgfence.job.queue.depth", qa, avail); got != 1; got = r.Collect().Value("pgfence.job.queue.depth", qa, avail) {
		if time.Now().After(deadline) {
			t.Fatalf("available = %v, want 1", got)
		}
		time.Sleep(100 * time.Millisecond) // polled: the retry comes a second after a failed query
	}
	enqueue(t, pool, claim.NewJob{Queue: qn})
	if got := r.Collect().Value("pgfence.job.queue.depth", qa, avail); got != 1 {
		t.Fatalf("available = %v within the interval, want the cached 1", got)
	}
}

// Completions written in batches by a Runner are counted per job.
func TestMetricsPoolCompletions(t *testing.T) {
	ctx := context.Background()
	r := otelxtest.New(t)
	pool := pgtest.Pool(t)
	qn := queue("metrics-pool")
	c := newClaimer(t, pool, qn, claim.WithMeterProvider(r.Provider))
	const n = 20
	for range n {
		enqueue(t, pool, claim.NewJob{Queue: qn})
	}
	var mu sync.Mutex
	var outcomes []claim.Outcome
	all := make(chan struct{})
	p, err := claim.NewRunner(c, func(context.Context, *claim.Job) error { return nil }, claim.WithWorkers(4),
		claim.WithResultHook(func(_ *claim.Job, res claim.Result) {
			mu.Lock()
			defer mu.Unlock()
			if outcomes = append(outcomes, res.Outcome); len(outcomes) == n {
				close(all)
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- p.Run(runCtx) }()
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		t.Fatal("jobs did not all finish")
	}
	stop()
	<-runDone
	for _, o := range outcomes {
		if o != claim.Completed {
			t.Fatalf("outcome %v", o)
		}
	}
	s := r.Collect()
	qa := attribute.String("queue", qn)
	if got := s.Value("pgfence.job.completed", qa); got != n {
		t.Errorf("completed = %v, want %d", got, n)
	}
	if got := s.Value("pgfence.job.claimed", qa); got != n {
		t.Errorf("claimed = %v, want %d", got, n)
	}
}

// A TxRunner counts a completion once its transaction has committed: a
// commit that fails (here a deferred unique constraint the handler broke)
// completes nothing, and nothing is counted.
func TestMetricsTxRunnerCommitFails(t *testing.T) {
	ctx := context.Background()
	r := otelxtest.New(t)
	pool := pgtest.Pool(t)
	qn := queue("metrics-txfail")
	c := newClaimer(t, pool, qn, claim.WithMeterProvider(r.Provider))
	enqueue(t, pool, claim.NewJob{Queue: qn})
	results := make(chan claim.Result, 1)
	p, err := claim.NewTxRunner(c, func(ctx context.Context, tx pgx.Tx, _ *claim.Job) error {
		_, err := tx.Exec(ctx, `CREATE TEMP TABLE commit_fails (x int UNIQUE DEFERRABLE INITIALLY DEFERRED) ON COMMIT DROP;
			INSERT INTO commit_fails VALUES (1), (1)`)
		return err
	}, claim.WithWorkers(1), claim.WithResultHook(func(_ *claim.Job, res claim.Result) { results <- res }))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- p.Run(runCtx) }()
	var res claim.Result
	select {
	case res = <-results:
	case <-time.After(30 * time.Second):
		t.Fatal("no result")
	}
	stop()
	<-runDone
	if res.Outcome == claim.Completed || res.Err == nil {
		t.Fatalf("result %+v, want a failed commit", res)
	}
	s := r.Collect()
	qa := attribute.String("queue", qn)
	if got := s.Value("pgfence.job.completed", qa); got != 0 {
		t.Errorf("completed = %v after a failed commit, want 0", got)
	}
	var state string
	if err := pool.QueryRow(ctx, `SELECT state FROM pgfence_jobs WHERE queue = $1`, qn).Scan(&state); err != nil || state == "completed" {
		t.Errorf("job state %q (%v), want not completed", state, err)
	}
}
