package claim_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/internal/testsupport/otelxtest"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// A table of the user's own in its own schema, with every column pgfence_jobs
// has under another name that needs quoting, the optional ones included:
// every statement claim sends (claim, renew, complete, fail, release,
// rescue, the batched forms, the pipelined complete-and-claim, sweep, the
// queue-depth query) works on it and touches only the claimer's queue.
func TestOwnTableAllColumnsRenamed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	const q = `"Renamed E2E"."All Renamed"`
	if _, err := pool.Exec(ctx, `
DROP SCHEMA IF EXISTS "Renamed E2E" CASCADE;
CREATE SCHEMA "Renamed E2E";
CREATE TABLE `+q+` (
  "Job Id"     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  "Line"       text NOT NULL,
  "Body"       jsonb NOT NULL DEFAULT '{}',
  "Status"     text NOT NULL DEFAULT 'available',
  "Prio"       integer NOT NULL DEFAULT 0,
  "Not Before" timestamptz NOT NULL DEFAULT now(),
  "Tries"      integer NOT NULL DEFAULT 0,
  "Max Tries"  integer NOT NULL DEFAULT 3,
  "Token"      bigint,
  "Worker"     text,
  "Leased To"  timestamptz,
  "Why"        text,
  "Done At"    timestamptz
);
INSERT INTO `+q+` ("Line", "Body", "Prio") SELECT 'mine', jsonb_build_object('n', i), i FROM generate_series(1, 5) i;
INSERT INTO `+q+` ("Line", "Not Before") VALUES ('other', now() - interval '1 hour');`); err != nil {
		t.Fatal(err)
	}
	tb := claim.Table{Schema: "Renamed E2E", Name: "All Renamed", ID: "Job Id", State: "Status", Priority: "Prio",
		RunAt: "Not Before", Attempt: "Tries", MaxAttempts: "Max Tries", Fence: "Token", Owner: "Worker",
		ExpiresAt: "Leased To", Queue: "Line", LastError: "Why", FinishedAt: "Done At", Payload: "Body"}
	r := otelxtest.New(t)
	c, err := claim.New(ctx, pool, claim.WithTable(tb), claim.WithQueue("mine"), claim.WithOwner("w1"),
		claim.WithMeterProvider(r.Provider), claim.WithQueueStatsInterval(time.Nanosecond),
		claim.WithRetryBackoff(func(int) time.Duration { return 0 }))
	if err != nil {
		t.Fatal(err)
	}
	row := func(id int64) (state, why string, tries int, done bool) {
		t.Helper()
		err := pool.QueryRow(ctx, `SELECT "Status", coalesce("Why", ''), "Tries", "Done At" IS NOT NULL FROM `+q+` WHERE "Job Id" = $1`, id).
			Scan(&state, &why, &tries, &done)
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	depth := func(state string) float64 {
		return r.Collect().Value("pgfence.job.queue.depth", attribute.String("queue", "mine"), attribute.String("state", state))
	}
	if got := depth("available"); got != 5 {
		t.Errorf("queue depth available = %v, want 5 (the other queue's job left out)", got)
	}

	jobs, err := c.Claim(ctx, 10, time.Minute)
	if err != nil || len(jobs) != 5 {
		t.Fatalf("claim = %d jobs, %v; want the queue's 5", len(jobs), err)
	}
	if string(jobs[0].Payload) != `{"n": 1}` || jobs[0].Attempt != 1 || jobs[0].MaxAttempts != 3 {
		t.Errorf("first job %+v, payload %s", jobs[0], jobs[0].Payload)
	}
	if got := depth("running"); got != 5 {
		t.Errorf("queue depth running = %v, want 5", got)
	}
	if err := c.Renew(ctx, jobs[0]); err != nil {
		t.Fatal(err)
	}
	if err := c.Complete(ctx, jobs[0]); err != nil {
		t.Fatal(err)
	}
	if st, _, _, done := row(jobs[0].ID); st != "completed" || !done {
		t.Errorf("completed job: %s, finished %v", st, done)
	}
	if res, err := c.Fail(ctx, jobs[1], errors.New("boom")); err != nil || res.Dead {
		t.Fatalf("fail = %+v, %v", res, err)
	}
	if st, why, _, done := row(jobs[1].ID); st != "available" || why != "boom" || done {
		t.Errorf("failed job: %s %q, finished %v", st, why, done)
	}
	if err := c.Release(ctx, jobs[2]); err != nil {
		t.Fatal(err)
	}
	if st, _, tries, _ := row(jobs[2].ID); st != "available" || tries != 0 {
		t.Errorf("released job: %s after %d tries", st, tries)
	}
	if lost, err := c.RenewManyForTest(ctx, jobs[3:], time.Minute); err != nil || len(lost) != 0 {
		t.Fatalf("renew many: %d lost, %v", len(lost), err)
	}
	if _, err := pool.Exec(ctx, `UPDATE `+q+` SET "Leased To" = now() - interval '1 second' WHERE "Job Id" = $1`, jobs[4].ID); err != nil {
		t.Fatal(err)
	}
	if requeued, _, err := c.Rescue(ctx, 10); err != nil || requeued != 1 {
		t.Fatalf("rescue = %d, %v", requeued, err)
	}
	if st, why, _, _ := row(jobs[4].ID); st != "available" || why != "lease expired (owner w1, fence "+strconv.FormatInt(jobs[4].Fence, 10)+")" {
		t.Errorf("rescued job: %s %q", st, why)
	}
	res, err := c.CompleteManyForTest(ctx, jobs[3:])
	if err != nil || res[0] != nil || !errors.Is(res[1], pgfence.ErrLeaseLost) {
		t.Fatalf("complete many = %v, %v; want the rescued one lost", res, err)
	}
	if res, err := c.SettleManyForTest(ctx, jobs[3:4]); err != nil || res[0] != nil {
		t.Fatalf("settle (read back) = %v, %v", res, err)
	}

	// jobs[1], [2] and [4] are available again: claim one, then complete it
	// and claim the other two in one pipeline.
	one, err := c.Claim(ctx, 1, time.Minute)
	if err != nil || len(one) != 1 {
		t.Fatalf("claim one = %v, %v", one, err)
	}
	done, rest, err := c.CompleteAndClaimForTest(ctx, one, 10, time.Minute)
	if err != nil || done[0] != nil || len(rest) != 2 {
		t.Fatalf("complete and claim = %v, %d jobs, %v", done, len(rest), err)
	}
	for _, j := range rest {
		if err := c.Complete(ctx, j); err != nil {
			t.Fatal(err)
		}
	}

	if _, err := pool.Exec(ctx, `UPDATE `+q+` SET "Done At" = now() - interval '2 hours' WHERE "Line" = 'mine'`); err != nil {
		t.Fatal(err)
	}
	if n, err := c.SweepFinished(ctx, time.Hour); err != nil || n != 5 {
		t.Fatalf("sweep = %d, %v; want the queue's 5", n, err)
	}
	var left string
	if err := pool.QueryRow(ctx, `SELECT string_agg("Line" || ':' || "Status" || ':' || "Tries", ',') FROM `+q).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != "other:available:0" {
		t.Errorf("left %q, want only the other queue's untouched job", left)
	}
}
