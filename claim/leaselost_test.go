package claim_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// counter sums the int64 counter name's data points whose attribute key is
// value (every data point when key is "").
func counter(t *testing.T, r *sdkmetric.ManualReader, name string, key attribute.Key, value string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				t.Fatalf("%s: %T, want an int64 sum", name, m.Data)
			}
			for _, dp := range sum.DataPoints {
				if v, ok := dp.Attributes.Value(key); key == "" || ok && v.AsString() == value {
					n += dp.Value
				}
			}
		}
	}
	return n
}

// A handler that ignores its ended context and returns nil after its job's
// lease was lost must not have the job completed: the outcome is LeaseLost
// (counted in pgfence.job.lease_lost, op complete), the row is left to
// Rescue, and nothing counts as completed. Covered for the plain Runner at
// the local deadline (renewals stall behind a table lock) and when a
// renewal finds the job claimed by another worker, and for the TxRunner at
// the local deadline.
func TestRunnerHandlerIgnoringLostLeaseIsNotCompleted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tx    bool
		stall bool // renewals stall until the local deadline; else the job is stolen
	}{
		{"runner/local deadline", false, true},
		{"runner/renewal finds the job gone", false, false},
		{"txrunner/local deadline", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			pool := pgtest.Pool(t)
			admin := pgtest.Pool(t)
			qn := queue("ignorelost")
			reader := sdkmetric.NewManualReader()
			c := newClaimer(t, pool, qn, claim.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
			thief := newClaimer(t, admin, qn, claim.WithOwner("thief"))
			id := enqueue(t, admin, claim.NewJob{Queue: qn})

			const ttl = 600 * time.Millisecond
			started := make(chan *claim.Job, 1)
			causes := make(chan error, 1)
			proceed := make(chan struct{})
			body := func(ctx context.Context, j *claim.Job) error {
				started <- j
				<-ctx.Done()
				causes <- context.Cause(ctx)
				<-proceed // past the local deadline, the context ignored
				return nil
			}
			results := make(chan claim.Result, 2)
			opts := []claim.Option{claim.WithWorkers(1), claim.WithTTL(ttl), claim.WithRescueInterval(-1),
				claim.WithResultHook(func(_ *claim.Job, r claim.Result) { results <- r })}
			var p *claim.Runner
			var err error
			if tc.tx {
				p, err = claim.NewTxRunner(c, func(ctx context.Context, _ pgx.Tx, j *claim.Job) error { return body(ctx, j) }, opts...)
			} else {
				p, err = claim.NewRunner(c, body, opts...)
			}
			if err != nil {
				t.Fatal(err)
			}
			runCtx, stop := context.WithCancel(ctx)
			runDone := make(chan error, 1)
			go func() { runDone <- p.Run(runCtx) }()
			stopped := false
			stopRunner := func() {
				if !stopped {
					stopped = true
					stop()
					if err := <-runDone; err != nil {
						t.Error(err)
					}
				}
			}
			defer stopRunner()

			j := <-started
			var lock pgx.Tx
			var stolen *claim.Job
			if tc.stall {
				lock, err = admin.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer lock.Rollback(ctx)
				if _, err := lock.Exec(ctx, `LOCK TABLE pgfence_jobs IN ACCESS EXCLUSIVE MODE`); err != nil {
					t.Fatal(err)
				}
			} else {
				expire(t, admin, id)
				if requeued, _, err := thief.Rescue(ctx, 10); err != nil || requeued != 1 {
					t.Fatalf("rescue %d %v", requeued, err)
				}
				stolen = claimOne(t, thief, time.Minute)
			}
			var cause error
			select {
			case cause = <-causes:
			case <-time.After(10 * time.Second):
				t.Fatal("the job's context did not end")
			}
			var lle *pgfence.LeaseLostError
			if !errors.As(cause, &lle) || lle.Op != "renew" || tc.stall != (lle.Cause == "local_deadline") {
				t.Fatalf("cause %v, want a lease lost by a renewal (at the local deadline: %v)", cause, tc.stall)
			}
			if !j.Deadline().Before(time.Now()) && tc.stall {
				t.Fatalf("context ended before the local deadline %v", j.Deadline())
			}
			close(proceed) // the handler returns nil anyway
			var r claim.Result
			select {
			case r = <-results:
			case <-time.After(10 * time.Second):
				t.Fatal("no result")
			}
			if r.Outcome != claim.LeaseLost || r.HandlerErr != nil {
				t.Fatalf("result %+v (%v), want lease lost", r, r.Outcome)
			}
			mustLeaseLost(t, "result error", r.Err)
			if lock != nil {
				if err := lock.Rollback(ctx); err != nil {
					t.Fatal(err)
				}
			}
			stopRunner()
			select {
			case r := <-results:
				t.Fatalf("a second result %+v (%v)", r, r.Outcome)
			default:
			}

			row := getJob(t, admin, id)
			if row.state != "running" {
				t.Fatalf("job %+v, want still running (not completed)", row)
			}
			if tc.stall {
				if row.fence == nil || *row.fence != j.Fence {
					t.Fatalf("job %+v, want still under fence %d", row, j.Fence)
				}
				// Rescue takes the job back once its lease expires.
				deadline := time.Now().Add(5 * time.Second)
				for {
					requeued, _, err := c.Rescue(ctx, 10)
					if err != nil {
						t.Fatal(err)
					}
					if requeued == 1 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("the job was never rescued")
					}
					time.Sleep(50 * time.Millisecond)
				}
				if row := getJob(t, admin, id); row.state != "available" || row.attempt != 1 {
					t.Fatalf("job after rescue %+v, want available after 1 attempt", row)
				}
			} else if row.fence == nil || *row.fence != stolen.Fence {
				t.Fatalf("job %+v: the new holder's claim (fence %d) must be untouched", row, stolen.Fence)
			}
			if n := counter(t, reader, "pgfence.job.lease_lost", "op", "complete"); n != 1 {
				t.Fatalf("pgfence.job.lease_lost{op=complete} = %d, want 1", n)
			}
			if n := counter(t, reader, "pgfence.job.completed", "", ""); n != 0 {
				t.Fatalf("pgfence.job.completed = %d, want 0", n)
			}
		})
	}
}
