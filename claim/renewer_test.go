package claim_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// A renewal that fails (its connection is cut) is retried after
// min(interval/4, 250ms), pglease's rule, not at the next interval: the job
// keeps its lease and completes.
func TestRunnerRetriesFailedRenewal(t *testing.T) {
	direct := pgtest.Pool(t)
	proxied, proxy := proxiedPool(t)
	qn := queue("renewretry")
	c := newClaimer(t, proxied, qn)
	id := enqueue(t, direct, claim.NewJob{Queue: qn})

	// Only the renew statements re-check the expiry; the Runner sends the
	// batched one. The first is cut 20ms after it was sent.
	fired := proxy.CutAfterSending(`"expires_at" > now()`, 20*time.Millisecond)
	// Renewal every 4s, retry after 250ms. The TTL is long so that a loaded
	// machine's reconnect after the cut cannot blur the retry with the
	// next round.
	const ttl = 12 * time.Second
	results := make(chan claim.Result, 1)
	retried := make(chan time.Duration, 1)
	p, err := claim.NewRunner(c, func(ctx context.Context, j *claim.Job) error {
		first := j.Deadline()
		select {
		case <-fired:
		case <-time.After(ttl):
			t.Error("the first renewal was not sent within the TTL")
			return nil
		}
		cut := time.Now()
		for !j.Deadline().After(first) && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond) // the renewer's retry moves it
		}
		retried <- time.Since(cut)
		t.Logf("renewal retried %v after the cut", time.Since(cut))
		return context.Cause(ctx)
	}, claim.WithWorkers(1), claim.WithTTL(ttl), claim.WithRescueInterval(-1),
		claim.WithResultHook(func(_ *claim.Job, r claim.Result) { results <- r }))
	if err != nil {
		t.Fatal(err)
	}
	r := runUntil(t, p, results, 1)[0]
	if r.Outcome != claim.Completed || r.Err != nil || r.HandlerErr != nil {
		t.Fatalf("result %+v, want completed with the lease kept", r)
	}
	// The cut, then 250ms, then a new connection and a round trip: well
	// under the 4s interval, and under the wait for the next round that a
	// retry at a sixth of the TTL would take (2s).
	if took := <-retried; took > 1500*time.Millisecond {
		t.Fatalf("the renewal was retried %v after it failed, want about 250ms", took)
	}
	if row := getJob(t, direct, id); row.state != "completed" {
		t.Fatalf("job %+v, want completed", row)
	}
}
