package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/examples/story"
	"github.com/pgfence/pgfence/pgguard"
	"github.com/pgfence/pgfence/pglease"
)

const schema = `
CREATE TABLE invoice_jobs (
  job_id     text   PRIMARY KEY,
  customer   text   NOT NULL,
  status     text   NOT NULL DEFAULT 'PENDING',
  last_fence bigint NOT NULL DEFAULT 0
);
-- What left the building: one row per invoice e-mail handed to the mailer.
CREATE TABLE invoice_emails (
  id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  job_id  text   NOT NULL,
  sent_by text   NOT NULL,
  fence   bigint NOT NULL
);
INSERT INTO invoice_jobs (job_id, customer) VALUES ('inv_72', 'ACME Corp');
`

const key = "invoice:inv_72"

// instance is one billing service process: its own pool and lease client.
type instance struct {
	name   string
	pool   *pgxpool.Pool
	leases *pglease.Client
	guard  *pgguard.Guard
}

// outcome of one instance's tick.
type outcome int

const (
	skipped     outcome = iota // the lease was held: someone else is on it
	sent                       // won the lease and sent the invoice
	alreadyDone                // won the lease, the idempotent write found it sent
)

func main() {
	story.Main("scheduled billing (three instances, skip when held, idempotent write)", run)
}

func run(ctx context.Context, env *story.Env, v *story.Verdict) error {
	if _, err := env.Pool.Exec(ctx, schema); err != nil {
		return err
	}
	var instances []*instance
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("billing-%d", i)
		pool, err := env.NewPool(ctx, 4)
		if err != nil {
			return err
		}
		leases, err := pglease.New(pool, pglease.WithOwner(name))
		if err != nil {
			return err
		}
		defer leases.Close()
		guard, err := pgguard.NewGuard(ctx, pool, pgguard.Table{Name: "invoice_jobs", KeyColumn: "job_id"},
			pgguard.WithDoneWhen(pgguard.Eq("status", "SENT"))) // SENT is final: a repeat is "already done"
		if err != nil {
			return err
		}
		instances = append(instances, &instance{name: name, pool: pool, leases: leases, guard: guard})
	}

	env.Section("tick 1: all three instances notice inv_72 is due at the same moment")
	env.Note("each one tries the lease %q once (TryAcquire) and skips if it is held", key)
	results := tick(ctx, env, instances, true)
	won, skips := story.Count(results, sent)+story.Count(results, alreadyDone), story.Count(results, skipped)
	v.Check(won == 1 && skips == 2, "tick 1: one instance of three won the lease and two skipped (won %d, skipped %d)", won, skips)

	env.Section("tick 2: a minute later, the instances run one after another")
	env.Note("each gets the lease (nobody holds it any more): the lease alone would let each send again;")
	env.Note("the idempotent write (status PENDING -> SENT) is what makes the repeat harmless")
	results = tick(ctx, env, instances, false)
	v.Check(story.Count(results, alreadyDone) == 3, "tick 2: all three later runs got the lease and the idempotent write refused each (%d of 3)", story.Count(results, alreadyDone))
	if err := ctx.Err(); err != nil {
		return err
	}

	env.Section("read back from the database")
	var emails int
	var status string
	var lastFence int64
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM invoice_emails WHERE job_id = 'inv_72'`).Scan(&emails); err != nil {
		return err
	}
	if err := env.Pool.QueryRow(ctx, `SELECT status, last_fence FROM invoice_jobs WHERE job_id = 'inv_72'`).Scan(&status, &lastFence); err != nil {
		return err
	}
	env.Note("invoice_emails rows for inv_72: %d; invoice status %s, last fence %d", emails, status, lastFence)
	v.Check(emails == 1, "exactly one invoice e-mail sent (%d)", emails)
	v.Check(status == "SENT", "the invoice is SENT (%s)", status)
	return nil
}

// tick runs one scheduled tick on every instance, all at once (concurrent)
// or one after the other.
func tick(ctx context.Context, env *story.Env, instances []*instance, concurrent bool) []outcome {
	results := make([]outcome, len(instances))
	if !concurrent {
		for i, in := range instances {
			results[i] = in.tick(ctx, env, func() {}, func() {})
		}
		return results
	}
	// The winner keeps the lease until every instance has tried, as a real
	// send (seconds) outlasts three acquisitions (milliseconds); waiting for
	// the attempts instead of sleeping keeps the example deterministic.
	var attempted, done sync.WaitGroup
	attempted.Add(len(instances))
	start := make(chan struct{})
	for i, in := range instances {
		done.Add(1)
		go func() {
			defer done.Done()
			<-start
			results[i] = in.tick(ctx, env, attempted.Done, attempted.Wait)
		}()
	}
	close(start)
	done.Wait()
	return results
}

// tick is one instance's scheduled run. attempted reports its try for the
// lease; othersAttempted returns once every instance has tried.
func (in *instance) tick(ctx context.Context, env *story.Env, attempted, othersAttempted func()) outcome {
	l, err := in.leases.TryAcquire(ctx, key, 30*time.Second)
	attempted()
	if errors.Is(err, pgfence.ErrNotAcquired) {
		h, _, _ := in.leases.Holder(ctx, key)
		env.Logf(in.name, "lease %s is held by %s: skip, someone else is billing", key, h.Owner)
		return skipped
	}
	if err != nil {
		env.Logf(in.name, "could not ask for the lease: %v (fail closed: skip)", err)
		return skipped
	}
	defer l.Release(context.WithoutCancel(ctx))
	env.Logf(in.name, "won the lease %s, fence %d", key, l.Fence())
	othersAttempted() // the send takes longer than the others' tries
	return in.send(ctx, env, l)
}

// send marks the invoice SENT and hands the e-mail to the mailer, in one
// transaction: the guarded write carries the fence and starts only from
// PENDING, so a repeat (or a stale holder) sends nothing.
func (in *instance) send(ctx context.Context, env *story.Env, l *pglease.Lease) outcome {
	err := pgx.BeginFunc(ctx, in.pool, func(tx pgx.Tx) error {
		if err := in.guard.Update(ctx, tx, "inv_72", l.Fence(), pgguard.Values{"status": "SENT"},
			pgguard.Eq("status", "PENDING")); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO invoice_emails (job_id, sent_by, fence) VALUES ('inv_72', $1, $2)`, in.name, l.Fence())
		return err
	})
	switch {
	case err == nil:
		env.Logf(in.name, "sent inv_72 to ACME Corp (status PENDING -> SENT, fence %d)", l.Fence())
		return sent
	case errors.Is(err, pgguard.ErrAlreadyDone):
		// Not stale (that would be ErrStaleFence): the invoice is already SENT.
		env.Logf(in.name, "idempotent write refused: inv_72 is already SENT; nothing sent")
		return alreadyDone
	default:
		env.Logf(in.name, "send failed: %v", err)
		return skipped
	}
}
