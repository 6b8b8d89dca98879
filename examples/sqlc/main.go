package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/examples/sqlc/appdb"
	"github.com/pgfence/pgfence/examples/story"
	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/pgguard"
	"github.com/pgfence/pgfence/pglease"
)

// schema is the app's own schema: the file sqlc reads is the one applied.
//
//go:embed schema.sql
var schema string

// frozenTTL is the lease of a holder that freezes: short, so that its
// expiry (by the database clock) comes quickly.
const frozenTTL = 300 * time.Millisecond

// invoicesTable names the app's table for pgguard. Guard.Check reads it;
// InstallTrigger puts the fencing trigger on it.
var invoicesTable = pgguard.Table{Name: "invoices", KeyColumn: "id"}

// app is what the example's holders share.
type app struct {
	env   *story.Env
	pool  *pgxpool.Pool
	a, b  *pglease.Client // A freezes (no auto-renewal), B takes over
	guard *pgguard.Guard  // only for Check: the writes are the app's own SQL
	jobs  *claim.Claimer
}

func main() {
	story.Main("guarding your own sqlc queries (generated code, one fence source, trigger variant)", run)
}

func run(ctx context.Context, env *story.Env, v *story.Verdict) error {
	w, err := setup(ctx, env)
	if err != nil {
		return err
	}
	if err := w.leaseAndStaleWrite(ctx, v); err != nil {
		return err
	}
	if err := w.jobAndLeaseOneSource(ctx, v); err != nil {
		return err
	}
	return w.triggerVariant(ctx, v)
}

func setup(ctx context.Context, env *story.Env) (*app, error) {
	if _, err := env.Pool.Exec(ctx, schema); err != nil {
		return nil, fmt.Errorf("applying schema.sql: %w", err)
	}
	q := appdb.New(env.Pool)
	for _, inv := range []appdb.CreateInvoiceParams{
		{ID: "inv_1", Customer: "ACME Corp", BillingEmail: "billing@acme.example"},
		{ID: "inv_2", Customer: "Globex", BillingEmail: "ap@globex.example"},
		{ID: "inv_3", Customer: "Initech", BillingEmail: "old-ap@initech.example"},
	} {
		if err := q.CreateInvoice(ctx, inv); err != nil {
			return nil, err
		}
	}
	w := &app{env: env, pool: env.Pool}
	var err error
	if w.a, err = pglease.New(env.Pool, pglease.WithOwner("holder-A"), pglease.WithoutAutoRenew()); err != nil {
		return nil, err
	}
	if w.b, err = pglease.New(env.Pool, pglease.WithOwner("holder-B")); err != nil {
		return nil, err
	}
	// SENT is final: a repeat of a done write is "already done", not "stale".
	if w.guard, err = pgguard.NewGuard(ctx, env.Pool, invoicesTable, pgguard.WithDoneWhen(pgguard.Eq("status", "SENT"))); err != nil {
		return nil, err
	}
	if w.jobs, err = claim.New(ctx, env.Pool, claim.WithOwner("job-worker")); err != nil {
		return nil, err
	}
	return w, nil
}

// handover: A acquires key and freezes past its TTL; B then acquires it
// with a newer fence.
func (w *app) handover(ctx context.Context, key string) (a, b *pglease.Lease, err error) {
	if a, err = w.a.TryAcquire(ctx, key, frozenTTL); err != nil {
		return nil, nil, err
	}
	w.env.Logf("holder-A", "acquires %s: fence %d, lease %v; then freezes (no renewals)", key, a.Fence(), frozenTTL)
	if b, err = w.b.Acquire(ctx, key, 30*time.Second); err != nil { // waits for A's expiry by the database clock
		return nil, nil, err
	}
	w.env.Logf("holder-B", "acquires %s after A's lease expired: fence %d (newer than A's %d)", key, b.Fence(), a.Fence())
	return a, b, nil
}

// leaseAndStaleWrite: a lease's fence in the app's generated guarded UPDATE;
// zero rows explained by Guard.Check.
func (w *app) leaseAndStaleWrite(ctx context.Context, v *story.Verdict) error {
	w.env.Section("1. a lease's fence in the app's own guarded UPDATE (appdb.MarkSent)")
	w.env.Note("MarkSent: ... SET status = 'SENT', last_fence = sqlc.arg(fence)::bigint")
	w.env.Note("           WHERE id = sqlc.arg(id) AND last_fence <= sqlc.arg(fence)::bigint AND status = 'PENDING'")
	a, b, err := w.handover(ctx, "invoice:inv_1")
	if err != nil {
		return err
	}
	defer b.Release(context.WithoutCancel(ctx))
	q := appdb.New(w.pool)

	n, err := q.MarkSent(ctx, appdb.MarkSentParams{ID: "inv_1", Fence: b.Fence()})
	if err != nil {
		return err
	}
	w.env.Logf("holder-B", "MarkSent(inv_1, fence %d): %d row", b.Fence(), n)
	v.Check(n == 1, "B's guarded write with its lease's fence sent inv_1 (%d row)", n)

	n, err = q.MarkSent(ctx, appdb.MarkSentParams{ID: "inv_1", Fence: a.Fence()})
	if err != nil {
		return err
	}
	why := w.guard.Check(ctx, w.pool, "inv_1", a.Fence(), pgguard.Eq("status", "PENDING"))
	w.env.Logf("holder-A", "resumes, MarkSent(inv_1, fence %d): %d rows; Guard.Check: %v", a.Fence(), n, why)
	v.Check(n == 0 && errors.Is(why, pgguard.ErrStaleFence),
		"A's late write changed 0 rows (%d) and Guard.Check called it a stale fence (%s)", n, kind(why))

	// A retry of B's own write (say its answer was lost): zero rows too, but
	// for another reason, which Check tells apart.
	n, err = q.MarkSent(ctx, appdb.MarkSentParams{ID: "inv_1", Fence: b.Fence()})
	if err != nil {
		return err
	}
	why = w.guard.Check(ctx, w.pool, "inv_1", b.Fence(), pgguard.Eq("status", "PENDING"))
	w.env.Logf("holder-B", "retries MarkSent(inv_1, fence %d): %d rows; Guard.Check: %v", b.Fence(), n, why)
	v.Check(n == 0 && errors.Is(why, pgguard.ErrAlreadyDone) && !errors.Is(why, pgguard.ErrStaleFence),
		"B's retry changed 0 rows (%d) and Guard.Check called it already done, not stale (%s)", n, kind(why))
	return nil
}

// jobAndLeaseOneSource: a job's fence and a lease's fence guard the same
// row, and one transaction mixes fencedb and appdb.
func (w *app) jobAndLeaseOneSource(ctx context.Context, v *story.Verdict) error {
	w.env.Section("2. a job's fence and a lease's fence, one source, one row; fencedb and appdb in one transaction")
	payload, _ := json.Marshal(map[string]string{"invoice": "inv_2"})
	if _, err := w.jobs.Enqueue(ctx, w.pool, claim.NewJob{Kind: "send-invoice", Payload: payload}); err != nil {
		return err
	}
	jobs, err := w.jobs.Claim(ctx, 1, 30*time.Second)
	if err != nil {
		return err
	}
	if len(jobs) != 1 {
		return fmt.Errorf("claimed %d jobs, want 1", len(jobs))
	}
	job := jobs[0]
	q := appdb.New(w.pool)
	st, err := q.ClaimInvoice(ctx, appdb.ClaimInvoiceParams{ID: "inv_2", Fence: job.Fence})
	if err != nil {
		return err
	}
	w.env.Logf("job-worker", "claims job %d (fence %d); claim-first ClaimInvoice(inv_2): status %s, last_fence %d", job.ID, job.Fence, st.Status, st.LastFence)
	w.env.Logf("job-worker", "stalls before sending")

	const key = "invoice:inv_2"
	l, err := w.b.TryAcquire(ctx, key, 30*time.Second)
	if err != nil {
		return err
	}
	defer l.Release(context.WithoutCancel(ctx))
	w.env.Logf("holder-B", "an operator's resend takes lease %s: fence %d", key, l.Fence())
	v.Check(l.Fence() > job.Fence, "the lease drawn after the claim has the higher fence, from the same source (%d > %d)", l.Fence(), job.Fence)

	var sent int64
	var lease fencedb.GetLeaseRow
	err = pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		var err error
		// pgfence's generated query, in the app's transaction: is the lease
		// still ours, by the database clock?
		if lease, err = fencedb.New(tx).GetLease(ctx, key); err != nil {
			return err
		}
		if !lease.Held || lease.Fence != l.Fence() {
			return fmt.Errorf("lease %s is no longer ours (held %v, fence %d)", key, lease.Held, lease.Fence)
		}
		// The app's generated queries, same transaction.
		app := appdb.New(tx)
		if _, err := app.ClaimInvoice(ctx, appdb.ClaimInvoiceParams{ID: "inv_2", Fence: l.Fence()}); err != nil {
			return err // pgx.ErrNoRows: a newer fence got there first
		}
		sent, err = app.MarkSent(ctx, appdb.MarkSentParams{ID: "inv_2", Fence: l.Fence()})
		return err
	})
	if err != nil {
		return err
	}
	w.env.Logf("holder-B", "one transaction: fencedb.GetLease (held %v, fence %d, %dms left) + appdb.ClaimInvoice + appdb.MarkSent: %d row",
		lease.Held, lease.Fence, lease.RemainingMicros/1000, sent)
	v.Check(sent == 1, "the transaction mixing fencedb.GetLease with appdb.MarkSent sent inv_2 (%d row)", sent)

	n, err := q.MarkSent(ctx, appdb.MarkSentParams{ID: "inv_2", Fence: job.Fence})
	if err != nil {
		return err
	}
	why := w.guard.Check(ctx, w.pool, "inv_2", job.Fence, pgguard.Eq("status", "PENDING"))
	w.env.Logf("job-worker", "resumes, MarkSent(inv_2, job fence %d): %d rows; Guard.Check: %v", job.Fence, n, why)
	v.Check(n == 0 && errors.Is(why, pgguard.ErrStaleFence),
		"the job's older fence was refused on the row the lease's fence wrote (%d rows, %s)", n, kind(why))
	// The job itself is settled: the work is done (by the lease holder).
	return w.jobs.Complete(ctx, job)
}

// triggerVariant: the fencing trigger on the app's table and the app's plain
// UPDATE inside RunFenced.
func (w *app) triggerVariant(ctx context.Context, v *story.Verdict) error {
	w.env.Section("3. the trigger variant: the app's plain UPDATE (appdb.SetBillingEmail) inside pgguard.RunFenced")
	if err := pgguard.InstallTrigger(ctx, w.pool, invoicesTable, pgguard.Strict); err != nil {
		return err
	}
	w.env.Note("pgguard.InstallTrigger(invoices, Strict): an UPDATE must run under a fence set by pgfence_set_fence")
	w.env.Note("in its own transaction (RunFenced does it) and not older than the row's last_fence")
	a, b, err := w.handover(ctx, "invoice:inv_3")
	if err != nil {
		return err
	}
	defer b.Release(context.WithoutCancel(ctx))

	setEmail := func(who string, fence int64, email string) error {
		return pgguard.RunFenced(ctx, w.pool, fence, func(tx pgx.Tx) error {
			n, err := appdb.New(tx).SetBillingEmail(ctx, appdb.SetBillingEmailParams{ID: "inv_3", BillingEmail: email})
			if err != nil {
				// The trigger's SQLSTATE PF001, as pgguard's error. (RunFenced
				// classifies too; outside it, call Classify yourself.)
				return pgguard.Classify(err)
			}
			w.env.Logf(who, "RunFenced(fence %d): SetBillingEmail(inv_3, %s): %d row", fence, email, n)
			return nil
		})
	}
	errB := setEmail("holder-B", b.Fence(), "ap@initech.example")
	v.Check(errB == nil, "B's plain UPDATE under its fence was let through (%s)", kind(errB))

	errA := setEmail("holder-A", a.Fence(), "typo@initech.example")
	w.env.Logf("holder-A", "resumes, RunFenced(fence %d): SetBillingEmail(inv_3): %v", a.Fence(), errA)
	v.Check(errors.Is(errA, pgguard.ErrStaleFence), "A's plain UPDATE with its older fence was refused by the trigger (%s)", kind(errA))

	_, errNone := appdb.New(w.pool).SetBillingEmail(ctx, appdb.SetBillingEmailParams{ID: "inv_3", BillingEmail: "nofence@initech.example"})
	errNone = pgguard.Classify(errNone)
	w.env.Logf("someone", "SetBillingEmail(inv_3) with no fence set: %v", errNone)
	v.Check(errors.Is(errNone, pgguard.ErrNoFence), "a plain UPDATE with no fence was refused in Strict mode (%s)", kind(errNone))

	return w.readBack(ctx, v, b.Fence())
}

// readBack checks the rows themselves.
func (w *app) readBack(ctx context.Context, v *story.Verdict, inv3Fence int64) error {
	w.env.Section("read back from the database (appdb.GetInvoice)")
	q := appdb.New(w.pool)
	var rows []appdb.Invoice
	for _, id := range []string{"inv_1", "inv_2", "inv_3"} {
		inv, err := q.GetInvoice(ctx, id)
		if err != nil {
			return err
		}
		w.env.Note("%s  %-9s %-7s %-24s last_fence %d", inv.ID, inv.Customer, inv.Status, inv.BillingEmail, inv.LastFence)
		rows = append(rows, inv)
	}
	v.Check(rows[0].Status == "SENT" && rows[1].Status == "SENT" && rows[2].Status == "PENDING",
		"inv_1 and inv_2 SENT, inv_3 untouched PENDING (%s, %s, %s)", rows[0].Status, rows[1].Status, rows[2].Status)
	v.Check(rows[2].BillingEmail == "ap@initech.example" && rows[2].LastFence == inv3Fence,
		"inv_3 holds B's e-mail and the trigger stamped B's fence (%s, %d)", rows[2].BillingEmail, rows[2].LastFence)
	return nil
}

// kind names a write's outcome for the verdict line: pgguard's error it
// satisfies, else the error itself.
func kind(err error) string {
	switch {
	case err == nil:
		return "no error"
	case errors.Is(err, pgguard.ErrStaleFence):
		return "ErrStaleFence"
	case errors.Is(err, pgguard.ErrAlreadyDone):
		return "ErrAlreadyDone"
	case errors.Is(err, pgguard.ErrNoFence):
		return "ErrNoFence"
	}
	return err.Error()
}
