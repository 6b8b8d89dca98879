package metricstest_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/pgfence/pgfence/internal/testsupport/otelxtest"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/payouts"
	"github.com/pgfence/pgfence/pgguard"
)

// Each outcome of a guarded write is counted by table, and each stale
// refusal once, as the Counter counts it.
func TestMetricsGuardedWrites(t *testing.T) {
	ctx := context.Background()
	r := otelxtest.New(t)
	pool := pgtest.Pool(t)
	table := newTable(t, pool)
	insertRow(t, pool, table, "k1")
	counter := new(pgtest.StaleCount)
	g, err := pgguard.NewGuard(ctx, pool, pgguard.Table{Name: table, KeyColumn: "job_id"},
		pgguard.WithStaleHook(counter.Hook), pgguard.WithMeterProvider(r.Provider), pgguard.WithDoneWhen(pgguard.Eq("status", "SENT")))
	if err != nil {
		t.Fatal(err)
	}
	f := fences(t, pool, 2)
	older, newer := f[0], f[1]
	pending := pgguard.Eq("status", "PENDING")

	var status string
	if err := g.ClaimFirst(ctx, pool, "k1", older, []string{"status"}, &status); err != nil { // applied (claim)
		t.Fatal(err)
	}
	if err := g.Update(ctx, pool, "k1", older, pgguard.Values{"writer": "A"}, pgguard.Eq("status", "NOPE")); err == nil { // precondition
		t.Fatal("precondition held")
	}
	if err := g.Update(ctx, pool, "k1", newer, pgguard.Values{"status": "SENT"}, pending); err != nil { // applied
		t.Fatal(err)
	}
	if err := g.Update(ctx, pool, "k1", newer, pgguard.Values{"status": "SENT"}, pending); err == nil { // done
		t.Fatal("second transition applied")
	}
	if err := g.Update(ctx, pool, "k1", older, pgguard.Values{"writer": "late"}); err == nil { // stale
		t.Fatal("stale write applied")
	}
	if err := g.ClaimFirst(ctx, pool, "k1", older, nil); err == nil { // stale (claim)
		t.Fatal("stale claim applied")
	}
	if err := g.Update(ctx, pool, "missing", newer, pgguard.Values{"writer": "x"}); err == nil { // no_row
		t.Fatal("write to a missing row applied")
	}

	s := r.Collect()
	tbl := attribute.String("table", g.Table())
	op := func(v string) attribute.KeyValue { return attribute.String("op", v) }
	out := func(v string) attribute.KeyValue { return attribute.String("outcome", v) }
	for _, w := range []struct {
		op, outcome string
		want        float64
	}{
		{"update", "applied", 1}, {"update", "precondition", 1}, {"update", "done", 1},
		{"update", "stale", 1}, {"update", "no_row", 1}, {"update", "error", 0},
		{"claim", "applied", 1}, {"claim", "stale", 1},
	} {
		if got := s.Value("pgfence.guard.writes", tbl, op(w.op), out(w.outcome)); got != w.want {
			t.Errorf("writes{op=%s, outcome=%s} = %v, want %v", w.op, w.outcome, got, w.want)
		}
	}
	if got, want := s.Value("pgfence.guard.stale", tbl), float64(counter.ByTable()[g.Table()]); got != 2 || got != want {
		t.Errorf("stale = %v, Counter says %v, want 2", got, want)
	}
	if s.Unit("pgfence.guard.writes") != "{write}" || s.Unit("pgfence.guard.stale") != "{write}" {
		t.Errorf("units %q %q", s.Unit("pgfence.guard.writes"), s.Unit("pgfence.guard.stale"))
	}
}

// A payout transition refused as stale counts in pgfence.guard.stale for
// payout_intents, through the Intents' Guard.
func TestMetricsPayoutStale(t *testing.T) {
	ctx := context.Background()
	r := otelxtest.New(t)
	pool := pgtest.Pool(t)
	counter := new(pgtest.StaleCount)
	intents, err := payouts.New(ctx, pool, pgguard.WithStaleHook(counter.Hook), pgguard.WithMeterProvider(r.Provider))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := intents.Create(ctx, pool, "po_metrics", 100, "EUR"); err != nil {
		t.Fatal(err)
	}
	f := fences(t, pool, 2)
	older, newer := f[0], f[1]
	if _, err := intents.BeginSubmit(ctx, pool, "po_metrics", newer); err != nil {
		t.Fatal(err)
	}
	_, err = intents.BeginSubmit(ctx, pool, "po_metrics", older)
	var se *pgguard.StaleFenceError
	if !errors.As(err, &se) {
		t.Fatalf("older holder's transition: %v, want a *StaleFenceError", err)
	}
	s := r.Collect()
	if got := s.Value("pgfence.guard.stale", attribute.String("table", se.Table)); got != 1 {
		t.Errorf("stale{table=%s} = %v, want 1 (Counter: %v)", se.Table, got, counter.ByTable())
	}
}
