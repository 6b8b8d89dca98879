package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/examples/story"
)

const schema = `
-- What the jobs did: one row per handler run that counted.
CREATE TABLE job_effects (
  id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  job_id bigint NOT NULL,
  fence  bigint NOT NULL,
  worker text   NOT NULL
);
`

const (
	jobs = 30
	// lease is the workers' job lease TTL: short, so that the long job needs
	// renewals within a second or two, not so short that a loaded machine
	// misses them.
	lease = 600 * time.Millisecond
	// frozenLease is the frozen worker's lease in the rescue scene.
	frozenLease = 300 * time.Millisecond
)

func main() {
	story.Main("job workers (SKIP LOCKED claiming, lease renewals, a rescued job's stale completion refused)", run)
}

func run(ctx context.Context, env *story.Env, v *story.Verdict) error {
	if _, err := env.Pool.Exec(ctx, schema); err != nil {
		return err
	}
	if err := workers(ctx, env, v); err != nil {
		return err
	}
	return rescued(ctx, env, v)
}

// workers: three pools of two workers each share 30 short jobs and one long
// one.
func workers(ctx context.Context, env *story.Env, v *story.Verdict) error {
	env.Section(fmt.Sprintf("%d short jobs and one long job; three worker processes with two workers each, lease %v", jobs, lease))
	queue, err := claim.New(ctx, env.Pool)
	if err != nil {
		return err
	}
	var longID int64
	for i := 1; i <= jobs+1; i++ {
		kind, payload := "email", fmt.Sprintf(`{"n": %d}`, i)
		if i == jobs+1 {
			kind = "export"
		}
		id, err := queue.Enqueue(ctx, env.Pool, claim.NewJob{Kind: kind, Payload: json.RawMessage(payload), MaxAttempts: 3})
		if err != nil {
			return err
		}
		if kind == "export" {
			longID = id
		}
	}
	env.Note("job %d is an export that takes %v, more than three times its lease TTL: renewals must keep it", longID, 3*lease+lease/2)

	var (
		mu        sync.Mutex
		outcomes  = map[claim.Outcome]int{}
		extended  bool
		longFence int64
	)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for w := 1; w <= 3; w++ {
		name := fmt.Sprintf("worker-%d", w)
		c, err := claim.New(ctx, env.Pool, claim.WithOwner(name))
		if err != nil {
			return err
		}
		handler := func(ctx context.Context, j *claim.Job) error {
			if j.ID == longID {
				first := j.ExpiresAt()
				env.Logf(name, "job %d (export, fence %d): starts; lease expires at %s", j.ID, j.Fence, first.Format("15:04:05.000"))
				select {
				case <-time.After(3*lease + lease/2):
				case <-ctx.Done():
					return context.Cause(ctx)
				}
				mu.Lock()
				extended, longFence = j.ExpiresAt().After(first), j.Fence
				mu.Unlock()
				env.Logf(name, "job %d (export): done; the renewals moved its lease to expire at %s", j.ID, j.ExpiresAt().Format("15:04:05.000"))
			} else {
				time.Sleep(20 * time.Millisecond)
			}
			_, err := env.Pool.Exec(ctx, `INSERT INTO job_effects (job_id, fence, worker) VALUES ($1, $2, $3)`, j.ID, j.Fence, name)
			return err
		}
		p, err := claim.NewRunner(c, handler, claim.WithWorkers(2), claim.WithTTL(lease), claim.WithPollInterval(20*time.Millisecond),
			claim.WithResultHook(func(j *claim.Job, r claim.Result) {
				mu.Lock()
				outcomes[r.Outcome]++
				mu.Unlock()
			}))
		if err != nil {
			return err
		}
		wg.Go(func() {
			if err := p.Run(runCtx); err != nil {
				env.Logf(name, "runner: %v", err)
			}
		})
	}
	err = story.WaitFor(ctx, func() bool {
		var n int
		env.Pool.QueryRow(ctx, `SELECT count(*) FROM pgfence_jobs WHERE queue = 'default' AND state = 'completed'`).Scan(&n)
		return n == jobs+1
	})
	stop()
	wg.Wait()
	if err != nil {
		return err
	}

	type byWorker struct {
		Owner string
		N     int
	}
	rows, _ := env.Pool.Query(ctx, `SELECT owner, count(*)::int FROM pgfence_jobs WHERE queue = 'default' GROUP BY owner ORDER BY owner`)
	spread, err := pgx.CollectRows(rows, pgx.RowToStructByPos[byWorker])
	if err != nil {
		return err
	}
	env.Note("completed jobs by worker (owner column): %v", spread)
	var completed, firstAttempt, runs, maxRuns int
	if err := env.Pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE state = 'completed'), count(*) FILTER (WHERE attempt = 1)
		  FROM pgfence_jobs WHERE queue = 'default'`).Scan(&completed, &firstAttempt); err != nil {
		return err
	}
	if err := env.Pool.QueryRow(ctx, `
		SELECT count(*), coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM job_effects GROUP BY job_id) r`).Scan(&runs, &maxRuns); err != nil {
		return err
	}
	env.Note("read back: %d of %d jobs completed, %d on their first attempt; %d jobs have effects, at most %d each", completed, jobs+1, firstAttempt, runs, maxRuns)
	mu.Lock()
	defer mu.Unlock()
	v.Check(completed == jobs+1 && runs == jobs+1 && maxRuns == 1 && outcomes[claim.Completed] == jobs+1,
		"every job ran once and completed, with no two workers on one job (%d completed, at most %d run per job)", completed, maxRuns)
	v.Check(len(spread) >= 2, "the jobs were spread over %d worker processes by SKIP LOCKED claiming", len(spread))
	v.Check(extended && longFence != 0 && firstAttempt == jobs+1,
		"renewals kept the long job's lease through %v of work on a %v lease (first attempt, not rescued)", 3*lease+lease/2, lease)
	return nil
}

// rescued: a worker freezes on a job past its lease; the job is rescued and
// done by another worker; the frozen worker's completion is refused.
func rescued(ctx context.Context, env *story.Env, v *story.Verdict) error {
	env.Section("a worker freezes on a job past its lease; the job is rescued and done again")
	reports, err := claim.New(ctx, env.Pool, claim.WithQueue("reports"))
	if err != nil {
		return err
	}
	id, err := reports.Enqueue(ctx, env.Pool, claim.NewJob{Kind: "report", MaxAttempts: 3})
	if err != nil {
		return err
	}
	slow, err := claim.New(ctx, env.Pool, claim.WithQueue("reports"), claim.WithOwner("worker-slow"))
	if err != nil {
		return err
	}
	fast, err := claim.New(ctx, env.Pool, claim.WithQueue("reports"), claim.WithOwner("worker-fast"))
	if err != nil {
		return err
	}

	js, err := slow.Claim(ctx, 1, frozenLease)
	if err != nil || len(js) != 1 {
		return fmt.Errorf("worker-slow claimed %d jobs: %v", len(js), err)
	}
	old := js[0]
	env.Logf("worker-slow", "claims job %d: attempt %d, fence %d, lease %v", old.ID, old.Attempt, old.Fence, frozenLease)
	env.Logf("worker-slow", "freezes: no renewals")

	// The rescuer (any runner's rescue loop; here called directly) returns
	// the job once its lease has expired by the database clock.
	var requeued int64
	if err := story.WaitFor(ctx, func() bool {
		requeued, _, err = fast.Rescue(ctx, 10)
		return err == nil && requeued == 1
	}); err != nil {
		return err
	}
	env.Logf("rescuer", "job %d's lease expired: requeued (%d)", id, requeued)

	js, err = fast.Claim(ctx, 1, lease)
	if err != nil || len(js) != 1 {
		return fmt.Errorf("worker-fast claimed %d jobs: %v", len(js), err)
	}
	cur := js[0]
	env.Logf("worker-fast", "claims job %d: attempt %d, fence %d", cur.ID, cur.Attempt, cur.Fence)
	errFast := complete(ctx, env, fast, cur, "worker-fast")

	env.Logf("worker-slow", "resumes and finishes its attempt")
	errBeat := slow.Renew(ctx, old)
	env.Logf("worker-slow", "renew: %v", errBeat)
	errSlow := complete(ctx, env, slow, old, "worker-slow")

	var state string
	var attempt, effects int
	var by string
	if err := env.Pool.QueryRow(ctx, `SELECT state, attempt FROM pgfence_jobs WHERE id = $1`, id).Scan(&state, &attempt); err != nil {
		return err
	}
	if err := env.Pool.QueryRow(ctx, `SELECT count(*), coalesce(max(worker), '') FROM job_effects WHERE job_id = $1`, id).Scan(&effects, &by); err != nil {
		return err
	}
	env.Note("read back: job %d is %s after %d attempts; %d effect row(s), by %s", id, state, attempt, effects, by)
	v.Check(errFast == nil && state == "completed" && attempt == 2, "the rescued job was completed by its new worker on attempt 2")
	v.Check(errors.Is(errSlow, pgfence.ErrLeaseLost) && errors.Is(errBeat, pgfence.ErrLeaseLost) && effects == 1 && by == "worker-fast",
		"the frozen worker's renewal and completion were refused, and its effect rolled back with it (%d effect row)", effects)
	return nil
}

// complete records the job's effect and its completion in one transaction:
// if the completion is refused, the effect rolls back with it.
func complete(ctx context.Context, env *story.Env, c *claim.Claimer, j *claim.Job, who string) error {
	err := pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO job_effects (job_id, fence, worker) VALUES ($1, $2, $3)`, j.ID, j.Fence, who); err != nil {
			return err
		}
		return c.CompleteTx(ctx, tx, j)
	})
	if err != nil {
		env.Logf(who, "complete job %d (fence %d): REFUSED: %v", j.ID, j.Fence, err)
	} else {
		env.Logf(who, "complete job %d (fence %d): accepted", j.ID, j.Fence)
	}
	return err
}
