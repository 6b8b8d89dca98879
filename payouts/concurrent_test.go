package payouts_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/payouts"
	"github.com/pgfence/pgfence/pgguard"
)

// TestConcurrentHolders: many holders, each with its own fence, race one
// payout through BeginSubmit and MarkSubmitted on one shared Intents. Exactly
// one records SUBMITTED; every other is told stale or already done, never
// anything else; the stale ones are the counted and hooked ones.
func TestConcurrentHolders(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	counter := new(pgtest.StaleCount)
	var hooked atomic.Uint64
	p, err := payouts.New(ctx, pool, pgguard.WithStaleHook(func(ctx context.Context, e *pgguard.StaleFenceError) {
		counter.Hook(ctx, e)
		hooked.Add(1)
	}))
	if err != nil {
		t.Fatal(err)
	}
	const holders = 16
	fs := fences(t, pool, holders)
	id := fmt.Sprintf("po_race_%d", fs[0])
	if _, err := p.Create(ctx, pool, id, 100, "EUR"); err != nil {
		t.Fatal(err)
	}

	errs := make([]error, holders)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, f := range fs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if _, err := p.BeginSubmit(ctx, pool, id, f); err != nil {
				errs[i] = err
				return
			}
			_, errs[i] = p.MarkSubmitted(ctx, pool, id, f, fmt.Sprintf("ref_%d", f))
		}()
	}
	close(start)
	wg.Wait()

	winner, stale := int64(0), uint64(0)
	for i, err := range errs {
		switch {
		case err == nil:
			if winner != 0 {
				t.Fatalf("two holders recorded SUBMITTED: fences %d and %d", winner, fs[i])
			}
			winner = fs[i]
		case errors.Is(err, pgguard.ErrStaleFence):
			stale++
		case errors.Is(err, pgguard.ErrAlreadyDone):
		default:
			t.Errorf("holder with fence %d: %v", fs[i], err)
		}
	}
	got, err := p.Get(ctx, pool, id)
	if err != nil {
		t.Fatal(err)
	}
	if winner == 0 || got.State != payouts.Submitted || got.ProviderRef != fmt.Sprintf("ref_%d", winner) {
		t.Fatalf("winner %d, payout %+v", winner, got)
	}
	if counter.Total() != stale || hooked.Load() != stale {
		t.Fatalf("counted %d and hooked %d stale transitions, saw %d", counter.Total(), hooked.Load(), stale)
	}
	t.Logf("winner fence %d, %d stale, %d already done, %d attempts", winner, stale, holders-1-int(stale), got.Attempts)
}
