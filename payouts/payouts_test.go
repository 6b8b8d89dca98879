package payouts_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/payouts"
	"github.com/pgfence/pgfence/pgguard"
)

// TestIntents walks the payout scenario: A records its intent and
// calls the provider, stalls, loses its lease; B retries with the same
// idempotency key and records the answer; A's late answer is refused; the
// repeated transition is stopped; reconciliation finds what is stuck.
func TestIntents(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	counter := new(pgtest.StaleCount)
	p, err := payouts.New(ctx, pool, pgguard.WithStaleHook(counter.Hook))
	if err != nil {
		t.Fatal(err)
	}

	// The ids are fixed for readability; start from a clean slate when the
	// test runs again on the same database (go test -count=N).
	if _, err := pool.Exec(ctx, `DELETE FROM payout_intents WHERE payout_id IN ('po_1', 'po_2', 'po_3', 'po_4')`); err != nil {
		t.Fatal(err)
	}
	// Fences in the order the holders come: A, B, a later holder, and the
	// reconciler.
	f := fences(t, pool, 4)
	fa, fb, fr, fRec := f[0], f[1], f[2], f[3]

	pgtest.Step(t, "Create is idempotent, one key per payout", func(t *testing.T) {
		created, err := p.Create(ctx, pool, "po_1", 12_500, "EUR")
		if err != nil {
			t.Fatal(err)
		}
		if created.State != payouts.Pending || created.IdempotencyKey != payouts.IdempotencyKey("po_1") || created.LastFence != 0 {
			t.Fatalf("created: %+v", created)
		}
		if !strings.HasPrefix(created.IdempotencyKey, "pgfence-payout-") || len(created.IdempotencyKey) != len("pgfence-payout-")+32 {
			t.Fatalf("idempotency key %q", created.IdempotencyKey)
		}
		if payouts.IdempotencyKey("po_2") == created.IdempotencyKey {
			t.Fatal("two payouts share a key")
		}
		again, err := p.Create(ctx, pool, "po_1", 12_500, "EUR")
		if err != nil || again.IdempotencyKey != created.IdempotencyKey {
			t.Fatalf("Create is not idempotent: %+v %v", again, err)
		}
		if _, err := p.Create(ctx, pool, "po_1", 99, "EUR"); !errors.Is(err, pgfence.ErrConflict) {
			t.Fatalf("Create with another amount: %v", err)
		}
	})

	pgtest.Step(t, "a stale holder's late answer is refused", func(t *testing.T) {
		// A: intent first, then the provider call.
		a, err := p.BeginSubmit(ctx, pool, "po_1", fa)
		if err != nil {
			t.Fatal(err)
		}
		if a.State != payouts.Submitting || a.Attempts != 1 || a.LastFence != fa || a.SubmittingSince.IsZero() {
			t.Fatalf("A's begin: %+v", a)
		}
		// The same holder may re-enter SUBMITTING with its token (its retry).
		if _, err := p.BeginSubmit(ctx, pool, "po_1", fa); err != nil {
			t.Fatalf("A's retry with the same fence: %v", err)
		}
		// A stalls past its lease. B retries, with the same idempotency key.
		b, err := p.BeginSubmit(ctx, pool, "po_1", fb)
		if err != nil {
			t.Fatal(err)
		}
		if b.IdempotencyKey != a.IdempotencyKey || b.Attempts != 3 || b.LastFence != fb {
			t.Fatalf("B's begin: %+v", b)
		}
		// A wakes and records what the provider told it: refused.
		var se *pgguard.StaleFenceError
		if _, err := p.MarkSubmitted(ctx, pool, "po_1", fa, "prov_A"); !errors.As(err, &se) || se.Presented != fa || se.Current != fb || se.Key != "po_1" {
			t.Fatalf("A's late MarkSubmitted: %v", err)
		}
		if _, err := p.MarkFailed(ctx, pool, "po_1", fa, "timeout"); !errors.Is(err, pgguard.ErrStaleFence) {
			t.Fatalf("A's late MarkFailed: %v", err)
		}
		if _, err := p.BeginSubmit(ctx, pool, "po_1", fa); !errors.Is(err, pgguard.ErrStaleFence) {
			t.Fatalf("A's late BeginSubmit: %v", err)
		}
		done, err := p.MarkSubmitted(ctx, pool, "po_1", fb, "prov_123")
		if err != nil {
			t.Fatal(err)
		}
		if done.State != payouts.Submitted || done.ProviderRef != "prov_123" {
			t.Fatalf("B's MarkSubmitted: %+v", done)
		}
	})

	pgtest.Step(t, "a repeated transition is already done, not stale", func(t *testing.T) {
		// SUBMITTED -> SUBMITTED: already done, not stale.
		_, err := p.MarkSubmitted(ctx, pool, "po_1", fb, "prov_123")
		if !errors.Is(err, pgguard.ErrAlreadyDone) || !errors.Is(err, pgguard.ErrPrecondition) || errors.Is(err, pgguard.ErrStaleFence) {
			t.Fatalf("repeated MarkSubmitted: %v", err)
		}
		if _, err := p.BeginSubmit(ctx, pool, "po_1", fr); !errors.Is(err, pgguard.ErrAlreadyDone) {
			t.Fatalf("BeginSubmit after SUBMITTED: %v", err)
		}
		if _, err := p.MarkFailed(ctx, pool, "po_1", fr, "late"); !errors.Is(err, pgguard.ErrAlreadyDone) {
			t.Fatalf("MarkFailed after SUBMITTED: %v", err)
		}
		if by := counter.ByTable(); counter.Total() != 3 || len(by) != 1 {
			t.Errorf("counter: %d %v", counter.Total(), counter.ByTable())
		}
	})

	pgtest.Step(t, "a transition from the wrong state", func(t *testing.T) {
		// MarkSubmitted on a PENDING payout: wrong state, not done.
		if _, err := p.Create(ctx, pool, "po_2", 100, "USD"); err != nil {
			t.Fatal(err)
		}
		cur, err := p.MarkSubmitted(ctx, pool, "po_2", fr, "x")
		if !errors.Is(err, pgguard.ErrPrecondition) || errors.Is(err, pgguard.ErrAlreadyDone) || cur.State != payouts.Pending ||
			!strings.Contains(err.Error(), "state is PENDING") {
			t.Fatalf("MarkSubmitted on PENDING: %+v, %v", cur, err)
		}
		// PENDING -> FAILED: given up before any attempt.
		if got, err := p.MarkFailed(ctx, pool, "po_2", fr, "cancelled"); err != nil || got.State != payouts.Failed || got.FailureReason != "cancelled" {
			t.Fatalf("MarkFailed on PENDING: %+v %v", got, err)
		}
	})

	pgtest.Step(t, "missing payouts", func(t *testing.T) {
		if _, err := p.BeginSubmit(ctx, pool, "po_404", fr); !errors.Is(err, pgfence.ErrNotFound) {
			t.Fatalf("BeginSubmit of a missing payout: %v", err)
		}
		if _, err := p.Get(ctx, pool, "po_404"); !errors.Is(err, pgfence.ErrNotFound) {
			t.Fatalf("Get of a missing payout: %v", err)
		}
	})

	pgtest.Step(t, "reconciliation finds the stuck payout", func(t *testing.T) {
		// Reconciliation: po_3 is left in SUBMITTING by a holder that crashed.
		if _, err := p.Create(ctx, pool, "po_3", 700, "GBP"); err != nil {
			t.Fatal(err)
		}
		if _, err := p.BeginSubmit(ctx, pool, "po_3", fr); err != nil {
			t.Fatal(err)
		}
		// Stuck measures age by the database clock (submitting_since is
		// now() there): only time passing makes po_3 older than 10ms.
		time.Sleep(20 * time.Millisecond)
		stuck, err := p.Stuck(ctx, pool, 10*time.Millisecond, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(stuck) != 1 || stuck[0].ID != "po_3" || stuck[0].IdempotencyKey != payouts.IdempotencyKey("po_3") {
			t.Fatalf("stuck: %+v", stuck)
		}
		if stuck, err := p.Stuck(ctx, pool, time.Hour, 10); err != nil || len(stuck) != 0 {
			t.Fatalf("stuck for an hour: %+v %v", stuck, err)
		}
		// The reconciler, under a fence of its own, records what the provider
		// said about the key.
		if got, err := p.MarkSubmitted(ctx, pool, "po_3", fRec, "prov_found"); err != nil || got.State != payouts.Submitted {
			t.Fatalf("reconciled: %+v %v", got, err)
		}
		if stuck, _ := p.Stuck(ctx, pool, 0, 10); len(stuck) != 0 {
			t.Fatalf("still stuck: %+v", stuck)
		}
	})

	pgtest.Step(t, "rolled back with the caller's transaction", func(t *testing.T) {
		if _, err := p.Create(ctx, pool, "po_4", 1, "EUR"); err != nil {
			t.Fatal(err)
		}
		pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := p.BeginSubmit(ctx, tx, "po_4", fRec); err != nil {
				t.Fatal(err)
			}
			return errors.New("roll back")
		})
		if got, _ := p.Get(ctx, pool, "po_4"); got.State != payouts.Pending || got.Attempts != 0 {
			t.Fatalf("rolled-back transition is visible: %+v", got)
		}
	})

	pgtest.Step(t, "bad input", func(t *testing.T) {
		for name, err := range map[string]error{
			"empty id":       func() error { _, err := p.Create(ctx, pool, "", 1, "EUR"); return err }(),
			"zero amount":    func() error { _, err := p.Create(ctx, pool, "x", 0, "EUR"); return err }(),
			"currency":       func() error { _, err := p.Create(ctx, pool, "x", 1, "eur'; --"); return err }(),
			"zero fence":     func() error { _, err := p.BeginSubmit(ctx, pool, "po_4", 0); return err }(),
			"empty ref":      func() error { _, err := p.MarkSubmitted(ctx, pool, "po_4", fRec, ""); return err }(),
			"NUL reason":     func() error { _, err := p.MarkFailed(ctx, pool, "po_4", fRec, "a\x00b"); return err }(),
			"limit":          func() error { _, err := p.Stuck(ctx, pool, 0, 0); return err }(),
			"negative age":   func() error { _, err := p.Stuck(ctx, pool, -time.Second, 1); return err }(),
			"nil db":         func() error { _, err := payouts.New(ctx, nil); return err }(),
			"nil stale hook": func() error { _, err := payouts.New(ctx, pool, pgguard.WithStaleHook(nil)); return err }(),
			"nil hook":       func() error { _, err := payouts.New(ctx, pool, pgguard.WithStaleHook(nil)); return err }(),
		} {
			if !errors.Is(err, pgfence.ErrInvalidInput) {
				t.Errorf("%s: %v", name, err)
			}
		}
		if got, _ := p.Get(ctx, pool, "po_4"); got.State != payouts.Pending || got.LastFence != 0 {
			t.Fatalf("bad input changed po_4: %+v", got)
		}
	})
}
