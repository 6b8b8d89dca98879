package claim_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

var queueSeq atomic.Int64

// queue names a queue of the test's own, so that reruns (-count) in the same
// database never see an earlier run's jobs.
func queue(name string) string { return fmt.Sprintf("%s-%d", name, queueSeq.Add(1)) }

func newClaimer(t *testing.T, pool *pgxpool.Pool, queue string, opts ...claim.Option) *claim.Claimer {
	t.Helper()
	c, err := claim.New(context.Background(), pool, append([]claim.Option{claim.WithQueue(queue), claim.WithOwner("test/" + queue)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func enqueue(t *testing.T, pool *pgxpool.Pool, j claim.NewJob) int64 {
	t.Helper()
	c, err := claim.New(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.Enqueue(context.Background(), pool, j)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// expire makes a job's lease end now, as if its worker had stalled past it.
func expire(t *testing.T, pool *pgxpool.Pool, id int64) {
	t.Helper()
	if _, err := pool.Exec(context.Background(),
		`UPDATE pgfence_jobs SET expires_at = now() - interval '1 millisecond' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
}

type jobRow struct {
	state   string
	attempt int
	fence   *int64
}

func getJob(t *testing.T, pool *pgxpool.Pool, id int64) jobRow {
	t.Helper()
	var r jobRow
	if err := pool.QueryRow(context.Background(), `SELECT state, attempt, fence FROM pgfence_jobs WHERE id = $1`, id).
		Scan(&r.state, &r.attempt, &r.fence); err != nil {
		t.Fatal(err)
	}
	return r
}

func claimOne(t *testing.T, c *claim.Claimer, ttl time.Duration) *claim.Job {
	t.Helper()
	jobs, err := c.Claim(context.Background(), 1, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 {
		t.Fatalf("claimed %d jobs, want 1", len(jobs))
	}
	return jobs[0]
}

func mustLeaseLost(t *testing.T, what string, err error) {
	t.Helper()
	var lle *pgfence.LeaseLostError
	if !errors.Is(err, pgfence.ErrLeaseLost) || !errors.As(err, &lle) {
		t.Fatalf("%s: got %v, want pgfence.ErrLeaseLost", what, err)
	}
}

func TestClaimOrderAndFences(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	qn := queue("order")
	c := newClaimer(t, pool, qn)
	low := enqueue(t, pool, claim.NewJob{Queue: qn, Priority: 5, Payload: []byte(`{"n":1}`)})
	high := enqueue(t, pool, claim.NewJob{Queue: qn, Priority: 1, Payload: []byte(`{"n":2}`)})
	later := enqueue(t, pool, claim.NewJob{Queue: qn, Priority: 0, Delay: time.Hour})
	enqueue(t, pool, claim.NewJob{Queue: "other-queue"})

	var a, b *claim.Job
	pgtest.Step(t, "claims come by priority, due jobs of its own queue only", func(t *testing.T) {
		first, err := c.Claim(ctx, 1, time.Minute)
		if err != nil || len(first) != 1 || first[0].ID != high {
			t.Fatalf("first claim = %v, %v; want job %d (priority 1)", first, err, high)
		}
		rest, err := c.Claim(ctx, 10, time.Minute)
		if err != nil || len(rest) != 1 || rest[0].ID != low {
			t.Fatalf("second claim = %v, %v; want only job %d (job %d is not due, the other is another queue)", rest, err, low, later)
		}
		a, b = first[0], rest[0]
	})

	pgtest.Step(t, "a claimed job carries its attempt, payload, fence and deadline", func(t *testing.T) {
		if a.Attempt != 1 || a.MaxAttempts != 25 || string(b.Payload) != `{"n": 1}` {
			t.Fatalf("attempt %d max %d payload %s", a.Attempt, a.MaxAttempts, b.Payload)
		}
		if a.Fence <= 0 || b.Fence <= a.Fence {
			t.Fatalf("fences %d then %d: want positive and increasing", a.Fence, b.Fence)
		}
		if time.Until(a.Deadline()) < 50*time.Second || a.ExpiresAt().IsZero() {
			t.Fatalf("deadline %v, expires at %v", a.Deadline(), a.ExpiresAt())
		}
		if r := getJob(t, pool, high); r.state != "running" || r.attempt != 1 || *r.fence != a.Fence {
			t.Fatalf("row after claim: %+v", r)
		}
	})

	pgtest.Step(t, "renew, complete twice, release", func(t *testing.T) {
		if err := c.Renew(ctx, a); err != nil {
			t.Fatal(err)
		}
		if err := c.Complete(ctx, a); err != nil {
			t.Fatal(err)
		}
		if err := c.Complete(ctx, a); err != nil {
			t.Fatalf("completing twice with the same fence: %v, want nil", err)
		}
		if err := c.Release(ctx, b); err != nil {
			t.Fatal(err)
		}
		if r := getJob(t, pool, low); r.state != "available" || r.attempt != 0 {
			t.Fatalf("released row: %+v; want available with the attempt given back", r)
		}
	})

	t.Run("a batch comes back in claim order, not id order", func(t *testing.T) {
		q := queue("batch-order")
		c2 := newClaimer(t, pool, q)
		var want []int64
		for p := int32(3); p >= 1; p-- {
			want = append([]int64{enqueue(t, pool, claim.NewJob{Queue: q, Priority: p})}, want...)
		}
		batch, err := c2.Claim(ctx, 3, time.Minute)
		if err != nil || len(batch) != 3 {
			t.Fatalf("batch %v %v", batch, err)
		}
		for i, j := range batch {
			if j.ID != want[i] {
				t.Fatalf("batch order %d: job %d, want %d", i, j.ID, want[i])
			}
		}
	})
}

// The four races in which River, Oban, pg-boss and Graphile Worker let a
// stale worker act.
func TestClaimRaces(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	qn := queue("races")
	c := newClaimer(t, pool, qn)
	id := enqueue(t, pool, claim.NewJob{Queue: qn})

	stale := claimOne(t, c, time.Minute)
	expire(t, pool, id)

	// Renew never resurrects an expired lease, even before rescue.
	mustLeaseLost(t, "renew after expiry", c.Renew(ctx, stale))

	requeued, dead, err := c.Rescue(ctx, 100)
	if err != nil || requeued != 1 || dead != 0 {
		t.Fatalf("rescue = %d requeued, %d dead, %v; want 1 requeued", requeued, dead, err)
	}
	if row := getJob(t, pool, id); row.state != "available" || row.attempt != 1 {
		t.Fatalf("rescued row %+v: want available, attempt still counted", row)
	}
	// Complete after rescue: refused.
	mustLeaseLost(t, "complete after rescue", c.Complete(ctx, stale))

	fresh := claimOne(t, c, time.Minute)
	if fresh.ID != id || fresh.Attempt != 2 || fresh.Fence <= stale.Fence {
		t.Fatalf("re-claim: %+v", fresh)
	}
	// Complete, renew, fail and release after re-claim: refused.
	mustLeaseLost(t, "complete after re-claim", c.Complete(ctx, stale))
	mustLeaseLost(t, "renew after re-claim", c.Renew(ctx, stale))
	_, err = c.Fail(ctx, stale, errors.New("late failure"))
	mustLeaseLost(t, "fail after re-claim", err)
	mustLeaseLost(t, "release after re-claim", c.Release(ctx, stale))
	if row := getJob(t, pool, id); row.state != "running" || *row.fence != fresh.Fence {
		t.Fatalf("stale writes changed the row: %+v", row)
	}

	if err := c.Complete(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	// Rescue after complete: a no-op, even once the lease time has passed.
	expire(t, pool, id)
	requeued, dead, err = c.Rescue(ctx, 100)
	if err != nil || requeued != 0 || dead != 0 {
		t.Fatalf("rescue after complete = %d requeued, %d dead, %v; want nothing", requeued, dead, err)
	}
	if row := getJob(t, pool, id); row.state != "completed" || row.attempt != 2 {
		t.Fatalf("row after rescue-after-complete: %+v", row)
	}
	mustLeaseLost(t, "renew after complete", c.Renew(ctx, fresh))
	mustLeaseLost(t, "release after complete", c.Release(ctx, fresh))
}

func TestRescueEndsDeadAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	qn := queue("dead")
	c := newClaimer(t, pool, qn)
	id := enqueue(t, pool, claim.NewJob{Queue: qn, MaxAttempts: 2})
	for attempt, want := range []string{"available", "dead"} {
		j := claimOne(t, c, time.Minute)
		if j.Attempt != attempt+1 {
			t.Fatalf("attempt %d, want %d", j.Attempt, attempt+1)
		}
		expire(t, pool, id)
		if _, _, err := c.Rescue(ctx, 10); err != nil {
			t.Fatal(err)
		}
		if row := getJob(t, pool, id); row.state != want || row.attempt != attempt+1 {
			t.Fatalf("after rescue %d: %+v, want %s", attempt+1, row, want)
		}
	}
	if jobs, err := c.Claim(ctx, 5, time.Minute); err != nil || len(jobs) != 0 {
		t.Fatalf("claimed a dead job: %v %v", jobs, err)
	}
}

func TestFailBackoffByDatabaseClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	qn := queue("fail")
	c := newClaimer(t, pool, qn, claim.WithRetryBackoff(func(int) time.Duration { return time.Hour }))
	id := enqueue(t, pool, claim.NewJob{Queue: qn, MaxAttempts: 2})
	j := claimOne(t, c, time.Minute)
	res, err := c.Fail(ctx, j, errors.New("boom\x00"))
	if err != nil || res.Dead {
		t.Fatalf("fail = %+v, %v", res, err)
	}
	var inFuture bool
	var lastErr string
	pool.QueryRow(ctx, `SELECT run_at > now() + interval '59 minutes', last_error FROM pgfence_jobs WHERE id = $1`, id).Scan(&inFuture, &lastErr)
	if !inFuture || lastErr != "boom" {
		t.Fatalf("run_at pushed an hour: %v, last_error %q", inFuture, lastErr)
	}
	if jobs, _ := c.Claim(ctx, 1, time.Minute); len(jobs) != 0 {
		t.Fatal("claimed a job before its retry time")
	}
	pool.Exec(ctx, `UPDATE pgfence_jobs SET run_at = now() WHERE id = $1`, id)
	j = claimOne(t, c, time.Minute)
	res, err = c.Fail(ctx, j, nil)
	if err != nil || !res.Dead {
		t.Fatalf("last attempt's failure = %+v, %v; want dead", res, err)
	}
	if row := getJob(t, pool, id); row.state != "dead" || row.attempt != 2 {
		t.Fatalf("row %+v", row)
	}
}

func TestBadInputClaimsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	qn := queue("bad")
	c := newClaimer(t, pool, qn)
	enqueue(t, pool, claim.NewJob{Queue: qn})
	t.Run("Claim, Rescue and Complete refuse bad arguments", func(t *testing.T) {
		for _, tc := range []struct {
			n   int
			ttl time.Duration
		}{{0, time.Minute}, {-1, time.Minute}, {claim.MaxBatch + 1, time.Minute}, {1 << 40, time.Minute},
			{1, 0}, {1, -time.Second}, {1, time.Microsecond}, {1, 25 * time.Hour}} {
			jobs, err := c.Claim(ctx, tc.n, tc.ttl)
			if !errors.Is(err, pgfence.ErrInvalidInput) || jobs != nil {
				t.Errorf("Claim(%d, %v) = %v, %v; want pgfence.ErrInvalidInput", tc.n, tc.ttl, jobs, err)
			}
		}
		if _, _, err := c.Rescue(ctx, 0); !errors.Is(err, pgfence.ErrInvalidInput) {
			t.Errorf("Rescue(0): %v", err)
		}
		if err := c.Complete(ctx, nil); !errors.Is(err, pgfence.ErrInvalidInput) {
			t.Errorf("Complete(nil): %v", err)
		}
	})

	t.Run("New refuses a bad table description", func(t *testing.T) {
		bad := func(mod func(*claim.Table)) error {
			tb := claim.DefaultTable()
			mod(&tb)
			_, err := claim.New(ctx, pool, claim.WithTable(tb))
			return err
		}
		for name, mod := range map[string]func(*claim.Table){
			"injection":     func(tb *claim.Table) { tb.Name = "pgfence_jobs; DROP TABLE pgfence_jobs" },
			"quote":         func(tb *claim.Table) { tb.State = `state" = 'x` },
			"NUL":           func(tb *claim.Table) { tb.ID = "id\x00" },
			"newline":       func(tb *claim.Table) { tb.Owner = "owner\n" },
			"too long":      func(tb *claim.Table) { tb.Fence = strings.Repeat("f", 64) },
			"empty":         func(tb *claim.Table) { tb.RunAt = "" },
			"bad utf8":      func(tb *claim.Table) { tb.Name = "\xff" },
			"duplicate":     func(tb *claim.Table) { tb.Attempt = "max_attempts" },
			"missing table": func(tb *claim.Table) { tb.Name = "no_such_table" },
			"missing col":   func(tb *claim.Table) { tb.Owner = "no_such_column" },
			"wrong type": func(tb *claim.Table) {
				tb.Fence = "owner"
				tb.Owner = "kind"
				tb.Priority = "attempt"
				tb.Attempt = "priority"
			},
			"fence type": func(tb *claim.Table) { tb.Fence = "attempt"; tb.Attempt = "fence" },
		} {
			err := bad(mod)
			if !errors.Is(err, pgfence.ErrInvalidInput) {
				t.Errorf("%s: got %v, want pgfence.ErrInvalidInput", name, err)
			} else {
				t.Logf("%s: %v", name, err)
			}
		}
		if _, err := claim.New(ctx, pool, claim.WithQueue("")); !errors.Is(err, pgfence.ErrInvalidInput) {
			t.Errorf("empty queue: %v", err)
		}
	})

	t.Run("the bad input claimed nothing and dropped nothing", func(t *testing.T) {
		var running int
		pool.QueryRow(ctx, `SELECT count(*) FROM pgfence_jobs WHERE queue = $1 AND (state <> 'available' OR attempt <> 0)`, qn).Scan(&running)
		if running != 0 {
			t.Fatalf("%d jobs left the available state after bad input", running)
		}
		var exists bool
		pool.QueryRow(ctx, `SELECT to_regclass('pgfence_jobs') IS NOT NULL`).Scan(&exists)
		if !exists {
			t.Fatal("the table is gone")
		}
	})
}

// A table of the user's own, with other column names, no queue column and
// integer ids.
func TestOwnTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	_, err := pool.Exec(ctx, `
DROP TABLE IF EXISTS "My Emails";
CREATE TABLE "My Emails" (
  email_id   integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  to_addr    text NOT NULL,
  status     varchar(16) NOT NULL DEFAULT 'available',
  prio       smallint NOT NULL DEFAULT 0,
  not_before timestamptz NOT NULL DEFAULT now(),
  tries      smallint NOT NULL DEFAULT 0,
  max_tries  smallint NOT NULL DEFAULT 3,
  token      bigint NOT NULL DEFAULT 0,
  worker     text,
  leased_to  timestamptz
);
CREATE INDEX ON "My Emails" (prio, not_before, email_id) WHERE status = 'available';
INSERT INTO "My Emails" (to_addr) VALUES ('a@example.com'), ('b@example.com');`)
	if err != nil {
		t.Fatal(err)
	}
	tb := claim.Table{Name: "My Emails", ID: "email_id", State: "status", Priority: "prio", RunAt: "not_before",
		Attempt: "tries", MaxAttempts: "max_tries", Fence: "token", Owner: "worker", ExpiresAt: "leased_to", Payload: "to_addr"}
	c, err := claim.New(ctx, pool, claim.WithTable(tb))
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := c.Claim(ctx, 5, time.Minute)
	if err != nil || len(jobs) != 2 || string(jobs[0].Payload) != `"a@example.com"` {
		t.Fatalf("claim = %v, %v", jobs, err)
	}
	if err := c.Complete(ctx, jobs[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fail(ctx, jobs[1], errors.New("no last-error column: not stored")); err != nil {
		t.Fatal(err)
	}
	pool.Exec(ctx, `UPDATE "My Emails" SET leased_to = now() - interval '1s', status = 'running' WHERE email_id = $1`, jobs[1].ID)
	if requeued, _, err := c.Rescue(ctx, 10); err != nil || requeued != 1 {
		t.Fatalf("rescue = %d, %v", requeued, err)
	}
	var states string
	pool.QueryRow(ctx, `SELECT string_agg(status || ':' || tries, ',' ORDER BY email_id) FROM "My Emails"`).Scan(&states)
	if states != "completed:1,available:1" {
		t.Fatalf("states %s", states)
	}
}

func TestCompleteTxCommitsWithTheWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	qn := queue("tx")
	c := newClaimer(t, pool, qn)
	pool.Exec(ctx, `DROP TABLE IF EXISTS tx_effects; CREATE TABLE tx_effects (job_id bigint PRIMARY KEY)`)
	id := enqueue(t, pool, claim.NewJob{Queue: qn})
	stale := claimOne(t, c, time.Minute)
	expire(t, pool, id)
	c.Rescue(ctx, 10)
	fresh := claimOne(t, c, time.Minute)

	do := func(j *claim.Job) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `INSERT INTO tx_effects VALUES ($1) ON CONFLICT DO NOTHING`, j.ID); err != nil {
			return err
		}
		if err := c.CompleteTx(ctx, tx, j); err != nil {
			return err // the effect rolls back with it
		}
		return tx.Commit(ctx)
	}
	mustLeaseLost(t, "stale CompleteTx", do(stale))
	var n int
	pool.QueryRow(ctx, `SELECT count(*) FROM tx_effects`).Scan(&n)
	if n != 0 {
		t.Fatal("the stale worker's effect committed")
	}
	if err := do(fresh); err != nil {
		t.Fatal(err)
	}
	pool.QueryRow(ctx, `SELECT count(*) FROM tx_effects`).Scan(&n)
	if n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
	if _, err := newClaimer(t, pool, "bad-payload").Enqueue(ctx, pool, claim.NewJob{Payload: []byte("{nope")}); !errors.Is(err, pgfence.ErrInvalidInput) {
		t.Fatal(fmt.Sprint("bad payload: ", err))
	}
}

// The claim's ORDER BY is served by the partial index: no sort, no scan of
// finished rows.
func TestClaimOrderServedByPartialIndex(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	qn := queue("plan")
	enqueueMany(t, pool, qn, 2000, 25)
	pool.Exec(ctx, `UPDATE pgfence_jobs SET state = 'completed' WHERE queue = $1 AND id % 2 = 0`, qn)
	pool.Exec(ctx, `ANALYZE pgfence_jobs`)
	rows, err := pool.Query(ctx, `EXPLAIN SELECT id FROM pgfence_jobs
   WHERE state = 'available' AND run_at <= now() AND queue = '`+qn+`'
   ORDER BY priority, run_at, id LIMIT 10 FOR UPDATE SKIP LOCKED`)
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		rows.Scan(&line)
		plan = append(plan, line)
	}
	p := strings.Join(plan, "\n")
	if !strings.Contains(p, "pgfence_jobs_claim_idx") || strings.Contains(p, "Sort") {
		t.Fatalf("claim plan does not use the partial index in order:\n%s", p)
	}
}

// Enqueue writes to the claimer's own table, with its names and in its
// queue, so that the claimer claims what it enqueued; a value for a column
// the table lacks is refused, not dropped.
func TestEnqueueOwnTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(ctx, `
DROP TABLE IF EXISTS "Enqueue Own";
CREATE TABLE "Enqueue Own" (
  job_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  lane       text NOT NULL,
  what       varchar(32),
  body       jsonb,
  status     text NOT NULL,
  prio       integer NOT NULL,
  not_before timestamptz NOT NULL,
  tries      integer NOT NULL,
  max_tries  integer NOT NULL,
  token      bigint,
  worker     text,
  leased_to  timestamptz
);`); err != nil {
		t.Fatal(err)
	}
	tb := claim.Table{Name: "Enqueue Own", ID: "job_id", State: "status", Priority: "prio", RunAt: "not_before",
		Attempt: "tries", MaxAttempts: "max_tries", Fence: "token", Owner: "worker", ExpiresAt: "leased_to",
		Queue: "lane", Kind: "what", Payload: "body"}
	c, err := claim.New(ctx, pool, claim.WithTable(tb), claim.WithQueue("east"))
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.Enqueue(ctx, pool, claim.NewJob{Kind: "ship", Payload: json.RawMessage(`{"n": 1}`), MaxAttempts: 4})
	if err != nil {
		t.Fatal(err)
	}
	var lane, what string
	var tries, maxTries int
	if err := pool.QueryRow(ctx, `SELECT lane, what, tries, max_tries FROM "Enqueue Own" WHERE job_id = $1`, id).
		Scan(&lane, &what, &tries, &maxTries); err != nil || lane != "east" || what != "ship" || tries != 0 || maxTries != 4 {
		t.Fatalf("row %d: lane %q kind %q tries %d of %d (%v)", id, lane, what, tries, maxTries, err)
	}
	jobs, err := c.Claim(ctx, 5, time.Minute)
	if err != nil || len(jobs) != 1 || jobs[0].ID != id || string(jobs[0].Payload) != `{"n": 1}` || jobs[0].Kind != "ship" {
		t.Fatalf("claim = %v, %v", jobs, err)
	}

	bare := claim.Table{Name: "Enqueue Own", ID: "job_id", State: "status", Priority: "prio", RunAt: "not_before",
		Attempt: "tries", MaxAttempts: "max_tries", Fence: "token", Owner: "worker", ExpiresAt: "leased_to"}
	b, err := claim.New(ctx, pool, claim.WithTable(bare))
	if err != nil {
		t.Fatal(err)
	}
	for name, j := range map[string]claim.NewJob{
		"queue": {Queue: "west"}, "kind": {Kind: "ship"}, "payload": {Payload: json.RawMessage(`{}`)},
	} {
		if _, err := b.Enqueue(ctx, pool, j); !errors.Is(err, pgfence.ErrInvalidInput) {
			t.Errorf("%s for a table without that column: %v, want pgfence.ErrInvalidInput", name, err)
		}
	}
}
