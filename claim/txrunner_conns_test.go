package claim_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// Each NewTxRunner worker holds a pool connection for its handler's
// transaction; renewals and claims need connections of their own (and
// WithListen one more). A pool too small for that is refused up front,
// saying what to set, instead of starving renewals so that every long job
// loses its lease. At the bound, jobs that hold their transaction's
// connection past their lease's first expiry, by the database clock, keep
// the lease (renewed meanwhile) and complete.
func TestTxRunnerNeedsConnectionsForRenewals(t *testing.T) {
	h := func(context.Context, pgx.Tx, *claim.Job) error { return nil }
	t.Run("refused below the bound", func(t *testing.T) {
		for _, tc := range []struct {
			maxConns int32
			workers  int
			listen   bool
			want     string
		}{
			{2, 2, false, "set MaxConns to at least 4 (workers + 2: one for renewals, one for claims)"},
			{3, 2, false, "set MaxConns to at least 4 (workers + 2: one for renewals, one for claims)"},
			{4, 2, true, "set MaxConns to at least 5 (workers + 3: one for renewals, one for claims, one held by WithListen's listener)"},
		} {
			pool := pgtest.Pool(t, func(c *pgxpool.Config) { c.MaxConns = tc.maxConns })
			c := newClaimer(t, pool, queue("txconns"))
			opts := []claim.Option{claim.WithWorkers(tc.workers)}
			if tc.listen {
				opts = append(opts, claim.WithListen("txconns"))
			}
			_, err := claim.NewTxRunner(c, h, opts...)
			if !errors.Is(err, pgfence.ErrInvalidInput) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("MaxConns %d, %d workers, listen %v: %v, want pgfence.ErrInvalidInput saying %q", tc.maxConns, tc.workers, tc.listen, err, tc.want)
			}
			// The plain Runner holds no connection during a handler.
			if _, err := claim.NewRunner(c, func(context.Context, *claim.Job) error { return nil }, opts...); err != nil {
				t.Errorf("NewRunner, MaxConns %d, %d workers: %v", tc.maxConns, tc.workers, err)
			}
		}
	})
	t.Run("a listen pool's listener holds none of the claimer's", func(t *testing.T) {
		pool := pgtest.Pool(t, func(c *pgxpool.Config) { c.MaxConns = 4 })
		c := newClaimer(t, pool, queue("txconns"))
		if _, err := claim.NewTxRunner(c, h, claim.WithWorkers(2), claim.WithListen("txconns", pgtest.Pool(t))); err != nil {
			t.Fatalf("MaxConns 4, 2 workers, WithListen with a listen pool: %v", err)
		}
	})
	for _, tc := range []struct {
		name     string
		maxConns int32
		listen   bool
	}{
		{"at the bound", 4, false},
		{"at the bound with WithListen", 5, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const workers, jobs = 2, 4
			pool := pgtest.Pool(t, func(c *pgxpool.Config) { c.MaxConns = tc.maxConns })
			qn := queue("txconns")
			c := newClaimer(t, pool, qn)
			ids := make([]int64, jobs)
			for i := range ids {
				ids[i] = enqueue(t, pool, claim.NewJob{Queue: qn})
			}
			var mu sync.Mutex
			var causes []error
			results := make(chan claim.Result, jobs)
			// Renewed every second and given up 2.7 s after the last renewal
			// was sent, a lease survives a renewal well over a second late,
			// as on a loaded machine: only a renewal that never gets a
			// connection loses it.
			opts := []claim.Option{claim.WithWorkers(workers), claim.WithTTL(3 * time.Second),
				claim.WithPollInterval(10 * time.Millisecond),
				claim.WithResultHook(func(_ *claim.Job, r claim.Result) { results <- r })}
			if tc.listen {
				opts = append(opts, claim.WithListen("txconns_bound"))
			}
			lost := func(ctx context.Context) { // must not happen
				mu.Lock()
				causes = append(causes, context.Cause(ctx))
				mu.Unlock()
			}
			p, err := claim.NewTxRunner(c, func(ctx context.Context, tx pgx.Tx, j *claim.Job) error {
				first := j.ExpiresAt()
				for {
					var now time.Time
					if err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
						if ctx.Err() != nil {
							lost(ctx)
							return nil
						}
						return err
					}
					if now.After(first) {
						return nil
					}
					select {
					case <-ctx.Done():
						lost(ctx)
						return nil
					case <-time.After(100 * time.Millisecond):
					}
				}
			}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range runUntil(t, p, results, jobs) {
				if r.Outcome != claim.Completed || r.Err != nil {
					t.Errorf("outcome %v (%v), want completed", r.Outcome, r.Err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(causes) != 0 {
				t.Fatalf("handlers' contexts ended: %v", causes)
			}
			for _, id := range ids {
				if row := getJob(t, pool, id); row.state != "completed" || row.attempt != 1 {
					t.Fatalf("job %d: %+v, want completed in one attempt", id, row)
				}
			}
		})
	}
}
