package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/examples/story"
	"github.com/pgfence/pgfence/pgguard"
	"github.com/pgfence/pgfence/pglease"
)

const schema = `
CREATE TABLE invoice_jobs (
  job_id      text   PRIMARY KEY,
  status      text   NOT NULL DEFAULT 'PENDING',
  total_cents bigint,
  computed_by text,
  last_fence  bigint NOT NULL DEFAULT 0
);
INSERT INTO invoice_jobs (job_id) VALUES ('inv_1'), ('inv_2'), ('inv_3');
CREATE TABLE ledger (
  account    text   PRIMARY KEY,
  balance    bigint NOT NULL,
  last_fence bigint NOT NULL DEFAULT 0
);
INSERT INTO ledger VALUES ('acct_9', 500, 0);
`

// ttl is A's lease: short, so that the example's "45-second freeze" takes
// a fraction of a second.
const ttl = 300 * time.Millisecond

type world struct {
	env     *story.Env
	a, b    *pglease.Client
	guard   *pgguard.Guard
	counter *staleWrites
}

// staleWrites counts the stale writes pgguard reports to WithStaleHook, per
// table: the number to watch in production (pgguard also counts them in the
// pgfence.guard.stale metric).
type staleWrites struct {
	mu      sync.Mutex
	byTable map[string]int
}

func (s *staleWrites) hook(_ context.Context, e *pgguard.StaleFenceError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byTable[e.Table]++
}

func (s *staleWrites) total() (n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.byTable {
		n += c
	}
	return n
}

func main() {
	story.Main("stale writer (fencing; claim-first off and on)", run)
}

func run(ctx context.Context, env *story.Env, v *story.Verdict) error {
	if _, err := env.Pool.Exec(ctx, schema); err != nil {
		return err
	}
	w := &world{env: env, counter: &staleWrites{byTable: map[string]int{}}}
	var err error
	// A's renewals freeze with A: no auto-renewal.
	if w.a, err = pglease.New(env.Pool, pglease.WithOwner("worker-A"), pglease.WithoutAutoRenew()); err != nil {
		return err
	}
	defer w.a.Close()
	if w.b, err = pglease.New(env.Pool, pglease.WithOwner("worker-B"),
		pglease.WithBackoff(10*time.Millisecond, 50*time.Millisecond), pglease.WithMaxWait(10*time.Second)); err != nil {
		return err
	}
	defer w.b.Close()
	if w.guard, err = pgguard.NewGuard(ctx, env.Pool, pgguard.Table{Name: "invoice_jobs", KeyColumn: "job_id"},
		pgguard.WithStaleHook(w.counter.hook)); err != nil {
		return err
	}

	env.Note("fences here are large numbers: the server's WAL timeline in the high bits, a sequence below;")
	env.Note("all that matters is that a later grant's fence is larger")

	// 1. The stale-writer timeline.
	env.Section("1. the stale-writer timeline: B writes, then A's late write arrives")
	la, lb, err := w.handover(ctx, "invoice:inv_1", "inv_1: PENDING")
	if err != nil {
		return err
	}
	errB := w.write(ctx, "worker-B", "inv_1", lb.Fence(), 12000)
	errA := w.write(ctx, "worker-A", "inv_1", la.Fence(), 10000)
	by, _ := w.row(ctx, "inv_1")
	v.Check(errB == nil && errors.Is(errA, pgguard.ErrStaleFence) && by == "worker-B",
		"1: A's late write after B's was refused as stale (B's write stands)")
	lb.Release(ctx)

	// 2. Claim-first off: the stale write lands first.
	env.Section("2. claim-first OFF: A's late write lands before B's first write")
	la, lb, err = w.handover(ctx, "invoice:inv_2", "inv_2: PENDING")
	if err != nil {
		return err
	}
	var readByB string
	if err := env.Pool.QueryRow(ctx, `SELECT status FROM invoice_jobs WHERE job_id = 'inv_2'`).Scan(&readByB); err != nil {
		return err
	}
	env.Logf("worker-B", "reads inv_2 (a plain SELECT): status %s, so it will compute and send it", readByB)
	errA = w.write(ctx, "worker-A", "inv_2", la.Fence(), 10000)
	errB = w.write(ctx, "worker-B", "inv_2", lb.Fence(), 12000)
	by, _ = w.row(ctx, "inv_2")
	if errA == nil {
		env.Note("EXPECTED, the documented limit: the row had seen no fence newer than A's, so A's stale write")
		env.Note("counted, and B acted on state it read before that write. Fencing does not cancel work in flight.")
	}
	v.Check(errA == nil && by == "worker-A",
		"2: without claim-first, A's early stale write was accepted: a fence check at write time cannot see a write from the future (row written by %s)", by)
	lb.Release(ctx)

	// 3. Claim-first on.
	env.Section("3. claim-first ON: B raises the row's fence as its first action")
	la, lb, err = w.handover(ctx, "invoice:inv_3", "inv_3: PENDING")
	if err != nil {
		return err
	}
	var status string
	if err := w.guard.ClaimFirst(ctx, env.Pool, "inv_3", lb.Fence(), []string{"status"}, &status); err != nil {
		return fmt.Errorf("B's claim: %w", err)
	}
	env.Logf("worker-B", "claims inv_3 with fence %d and inherits status %s, in one statement", lb.Fence(), status)
	errA = w.write(ctx, "worker-A", "inv_3", la.Fence(), 10000)
	errB = w.write(ctx, "worker-B", "inv_3", lb.Fence(), 12000)
	by, _ = w.row(ctx, "inv_3")
	v.Check(errors.Is(errA, pgguard.ErrStaleFence) && errB == nil && by == "worker-B",
		"3: with claim-first, A's stale write was refused although it landed before B's first write")
	lb.Release(ctx)

	// 4. The fencing trigger.
	env.Section("4. database-enforced fencing: a hand-written UPDATE without the fence predicate")
	ledger := pgguard.Table{Name: "ledger"}
	if err := pgguard.InstallTrigger(ctx, env.Pool, ledger, pgguard.Strict); err != nil {
		return err
	}
	env.Note("the ledger table has pgguard's fencing trigger (strict mode): every UPDATE/DELETE must carry a fence")
	la, lb, err = w.handover(ctx, "account:acct_9", "acct_9: balance 500")
	if err != nil {
		return err
	}
	debit := func(who string, fence int64, cents int) error {
		err := pgguard.RunFenced(ctx, env.Pool, fence, func(tx pgx.Tx) error {
			// No "AND last_fence <= $fence": the trigger checks it anyway.
			_, err := tx.Exec(ctx, `UPDATE ledger SET balance = balance - $1 WHERE account = 'acct_9'`, cents)
			return err
		}, pgguard.WithStaleHook(w.counter.hook))
		if err != nil {
			env.Logf(who, "UPDATE ledger SET balance = balance - %d (fence %d): REFUSED: %v", cents, fence, err)
		} else {
			env.Logf(who, "UPDATE ledger SET balance = balance - %d (fence %d): accepted", cents, fence)
		}
		return err
	}
	errB = debit("worker-B", lb.Fence(), 100)
	errA = debit("worker-A", la.Fence(), 100)
	_, errNoFence := env.Pool.Exec(ctx, `UPDATE ledger SET balance = 0 WHERE account = 'acct_9'`)
	errNoFence = pgguard.Classify(errNoFence)
	env.Logf("operator", "UPDATE ledger SET balance = 0 with no fence at all: %v", errNoFence)
	var balance int64
	if err := env.Pool.QueryRow(ctx, `SELECT balance FROM ledger WHERE account = 'acct_9'`).Scan(&balance); err != nil {
		return err
	}
	env.Note("acct_9's balance: %d (500 - one debit of 100)", balance)
	v.Check(errB == nil && errors.Is(errA, pgguard.ErrStaleFence) && errors.Is(errNoFence, pgguard.ErrNoFence) && balance == 400,
		"4: the fencing trigger refused the stale raw UPDATE and the unfenced one (balance %d)", balance)
	lb.Release(ctx)

	env.Section("monitoring")
	env.Note("stale writes caught (pgguard.WithStaleHook): %d, by table %v", w.counter.total(), w.counter.byTable)
	env.Note("each one is a paused holder that the fence stopped: a number to watch, not a bug to silence")
	v.Check(w.counter.total() == 3, "the stale-write counter saw the 3 refusals (%d)", w.counter.total())
	return nil
}

// handover replays the stale-writer timeline up to the late write: A acquires,
// freezes past its TTL, B acquires the same key with a newer fence.
func (w *world) handover(ctx context.Context, key, reads string) (a, b *pglease.Lease, err error) {
	a, err = w.a.TryAcquire(ctx, key, ttl)
	if err != nil {
		return nil, nil, err
	}
	w.env.Logf("worker-A", "acquires %s: fence %d, lease %v; reads %s", key, a.Fence(), ttl, reads)
	w.env.Logf("worker-A", "freezes (GC pause, VM migration...): no renewals, no writes")
	b, err = w.b.Acquire(ctx, key, 30*time.Second) // waits until A's lease expired by the database clock
	if err != nil {
		return nil, nil, err
	}
	w.env.Logf("lock", "A's lease expired by the database clock")
	w.env.Logf("worker-B", "acquires %s: fence %d (newer than A's %d)", key, b.Fence(), a.Fence())
	cause := context.Cause(a.Context())
	if cause == nil {
		cause = errors.New("still valid")
	}
	w.env.Logf("worker-A", "resumes. Its lease's own view: %v", cause)
	w.env.Logf("worker-A", "but its write was already past that check (or on the wire): it goes out with fence %d", a.Fence())
	return a, b, nil
}

// write is the worker's guarded write: PENDING -> SENT, carrying its fence.
func (w *world) write(ctx context.Context, who, row string, fence int64, total int64) error {
	err := w.guard.Update(ctx, w.env.Pool, row, fence,
		pgguard.Values{"status": "SENT", "total_cents": total, "computed_by": who},
		pgguard.Eq("status", "PENDING"))
	switch {
	case err == nil:
		w.env.Logf(who, "writes %s: PENDING -> SENT, total %d, fence %d: ACCEPTED", row, total, fence)
	case errors.Is(err, pgguard.ErrStaleFence):
		w.env.Logf(who, "writes %s with fence %d: REFUSED, stale: %v", row, fence, err)
	default:
		w.env.Logf(who, "writes %s with fence %d: refused: %v", row, fence, err)
	}
	return err
}

// row reads who wrote the invoice, from the database.
func (w *world) row(ctx context.Context, row string) (computedBy string, fence int64) {
	var by *string
	w.env.Pool.QueryRow(ctx, `SELECT computed_by, last_fence FROM invoice_jobs WHERE job_id = $1`, row).Scan(&by, &fence)
	if by != nil {
		computedBy = *by
	}
	w.env.Logf("database", "%s was written by %s; its fence is %d", row, computedBy, fence)
	return computedBy, fence
}
