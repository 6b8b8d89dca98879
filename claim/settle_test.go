package claim_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/internal/testsupport/faultproxy"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// proxiedPool returns a pool whose connections go through a fault proxy
// (pgtest.ProxiedPool).
func proxiedPool(t *testing.T) (*pgxpool.Pool, *faultproxy.Proxy) {
	t.Helper()
	return pgtest.ProxiedPool(t)
}

// runUntil runs p until want results arrived and returns them.
func runUntil(t *testing.T, p *claim.Runner, results <-chan claim.Result, want int) []claim.Result {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- p.Run(ctx) }()
	var got []claim.Result
	timeout := time.After(30 * time.Second)
	for len(got) < want {
		select {
		case r := <-results:
			got = append(got, r)
		case <-timeout:
			t.Fatalf("got %d of %d results in 30s", len(got), want)
		}
	}
	stop()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	return got
}

func effects(t *testing.T, pool *pgxpool.Pool, table string) []int64 {
	t.Helper()
	rows, _ := pool.Query(context.Background(), `SELECT job_id FROM `+table+` ORDER BY job_id`)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func effectsTable(t *testing.T, pool *pgxpool.Pool, name string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+name+`; CREATE TABLE `+name+` (job_id bigint PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
}

// A TxHandler that ignores its context: its job is rescued and claimed by
// another worker while it runs, the runner's renewal finds the lease gone and
// ends the handler's context, and the handler returns nil anyway. The
// attempt is stale: lease lost (not a write error), effects rolled back, the
// new holder's claim untouched.
func TestTxRunnerStaleAttemptIsLeaseLost(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	effectsTable(t, pool, "txpool_stale_effects")
	qn := queue("txstale")
	c := newClaimer(t, pool, qn)
	thief := newClaimer(t, pool, qn, claim.WithOwner("thief"))
	id := enqueue(t, pool, claim.NewJob{Queue: qn})

	var stolen *claim.Job
	results := make(chan claim.Result, 1)
	p, err := claim.NewTxRunner(c, func(ctx context.Context, tx pgx.Tx, j *claim.Job) error {
		if _, err := tx.Exec(ctx, `INSERT INTO txpool_stale_effects VALUES ($1)`, j.ID); err != nil {
			return err
		}
		expire(t, pool, j.ID)
		// Not the handler's ctx: the renewal that finds the lease expired
		// may end it before the rescue is done.
		if requeued, _, err := thief.Rescue(context.Background(), 10); err != nil || requeued != 1 {
			t.Errorf("rescue %d %v", requeued, err)
		}
		stolen = claimOne(t, thief, time.Minute)
		<-ctx.Done() // the next renewal finds the lease gone
		return nil   // ... and the handler carries on regardless
	}, claim.WithWorkers(1), claim.WithTTL(300*time.Millisecond), claim.WithRescueInterval(-1),
		claim.WithResultHook(func(_ *claim.Job, r claim.Result) { results <- r }))
	if err != nil {
		t.Fatal(err)
	}
	r := runUntil(t, p, results, 1)[0]
	if r.Outcome != claim.LeaseLost {
		t.Fatalf("outcome %v (%v), want lease lost", r.Outcome, r.Err)
	}
	mustLeaseLost(t, "stale attempt's result", r.Err)
	if got := effects(t, pool, "txpool_stale_effects"); len(got) != 0 {
		t.Fatalf("effects %v: the stale attempt's effect must roll back", got)
	}
	row := getJob(t, pool, id)
	if row.state != "running" || row.fence == nil || *row.fence != stolen.Fence {
		t.Fatalf("job %+v: the new holder's claim (fence %d) must be untouched", row, stolen.Fence)
	}
	if err := thief.Complete(ctx, stolen); err != nil {
		t.Fatalf("the new holder cannot complete: %v", err)
	}
}

// The connection breaks after COMMIT was sent and ran, before its answer
// arrives: the pool reads the job back by id + fence on another connection
// and reports what happened, completed, instead of a write error.
func TestTxRunnerLostCommitAnswerIsSettled(t *testing.T) {
	direct := pgtest.Pool(t)
	effectsTable(t, direct, "txpool_lost_commit_effects")
	proxied, proxy := proxiedPool(t)
	qn := queue("txlostcommit")
	c := newClaimer(t, proxied, qn)
	id := enqueue(t, direct, claim.NewJob{Queue: qn})

	// pgx commits with the simple query "commit"; the NUL ends the query
	// text, so no other statement matches.
	fired := proxy.CutAfterSending("commit\x00", 200*time.Millisecond)
	results := make(chan claim.Result, 1)
	p, err := claim.NewTxRunner(c, func(ctx context.Context, tx pgx.Tx, j *claim.Job) error {
		_, err := tx.Exec(ctx, `INSERT INTO txpool_lost_commit_effects VALUES ($1)`, j.ID)
		return err
	}, claim.WithWorkers(1), claim.WithRescueInterval(-1),
		claim.WithResultHook(func(_ *claim.Job, r claim.Result) { results <- r }))
	if err != nil {
		t.Fatal(err)
	}
	r := runUntil(t, p, results, 1)[0]
	select {
	case <-fired:
	default:
		t.Fatal("the fault never fired")
	}
	if r.Outcome != claim.Completed || r.Err != nil {
		t.Fatalf("outcome %v (%v), want completed: the commit landed", r.Outcome, r.Err)
	}
	if row := getJob(t, direct, id); row.state != "completed" {
		t.Fatalf("job %+v, want completed", row)
	}
	if got := effects(t, direct, "txpool_lost_commit_effects"); len(got) != 1 || got[0] != id {
		t.Fatalf("effects %v, want exactly job %d's", got, id)
	}
}

// The same for Pool's batched completion: the answer to the completion
// statement is lost; the pool settles it (sends it again, reads back) and
// reports every job completed, once.
func TestRunnerLostCompletionAnswerIsSettled(t *testing.T) {
	direct := pgtest.Pool(t)
	proxied, proxy := proxiedPool(t)
	qn := queue("lostcompletion")
	c := newClaimer(t, proxied, qn)
	const n = 5
	enqueueMany(t, direct, qn, n, 1)

	// Only the batched completion joins the arrays followed by a comma.
	fired := proxy.CutAfterSending("x(id, fence),", 200*time.Millisecond)
	results := make(chan claim.Result, n)
	release := make(chan struct{})
	var started atomic.Int32
	p, err := claim.NewRunner(c, func(ctx context.Context, j *claim.Job) error {
		if started.Add(1) == n {
			close(release)
		}
		<-release // all n finish together: one batch, most likely
		return nil
	}, claim.WithWorkers(n), claim.WithRescueInterval(-1),
		claim.WithResultHook(func(_ *claim.Job, r claim.Result) { results <- r }))
	if err != nil {
		t.Fatal(err)
	}
	got := runUntil(t, p, results, n)
	select {
	case <-fired:
	default:
		t.Fatal("the fault never fired")
	}
	for _, r := range got {
		if r.Outcome != claim.Completed || r.Err != nil {
			t.Fatalf("outcome %v (%v), want completed", r.Outcome, r.Err)
		}
	}
	var completed int
	if err := direct.QueryRow(context.Background(), `SELECT count(*) FROM pgfence_jobs WHERE queue = $1 AND state = 'completed' AND attempt = 1`, qn).Scan(&completed); err != nil {
		t.Fatal(err)
	}
	if completed != n {
		t.Fatalf("%d of %d jobs completed on their first attempt", completed, n)
	}
}
