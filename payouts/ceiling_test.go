package payouts_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/payouts"
	"github.com/pgfence/pgfence/pgguard"
)

// TestFenceCeiling: a transition with a fence above the highest pgfence has
// issued is refused; WithOwnFenceSource turns the check off.
func TestFenceCeiling(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	issued := fences(t, pool, 1)[0]
	const madeUp = int64(1) << 62

	p, err := payouts.New(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("ceiling-%d", issued)
	if _, err := p.Create(ctx, pool, id, 100, "EUR"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.BeginSubmit(ctx, pool, id, madeUp); !errors.Is(err, pgguard.ErrFenceAboveCeiling) {
		t.Fatalf("BeginSubmit with a made-up fence: %v", err)
	}

	own, err := payouts.New(ctx, pool, pgguard.WithOwnFenceSource())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := own.BeginSubmit(ctx, pool, id, madeUp); err != nil {
		t.Fatalf("WithOwnFenceSource BeginSubmit: %v", err)
	}
	// Out of SUBMITTING, so that other tests' reconciliation does not see it.
	if _, err := own.MarkFailed(ctx, pool, id, madeUp, "test over"); err != nil {
		t.Fatal(err)
	}
}
