package metricstest_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"

	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/internal/testsupport/otelxtest"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// listenDisabled waits up to 5 s for pgfence.listen.disabled (with attrs)
// to reach want, and returns what it last read.
func listenDisabled(t *testing.T, r *otelxtest.Reader, want float64, attrs ...attribute.KeyValue) float64 {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := r.Collect().Value("pgfence.listen.disabled", attrs...)
		if got == want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A wake-on-release client counts its listener once in
// pgfence.listen.disabled behind PgBouncer in transaction mode, however
// often it waits, and not on a direct pool.
func TestMetricsListenDisabled(t *testing.T) {
	for _, c := range []struct {
		name string
		pool func(t *testing.T) *pgxpool.Pool
		want float64
	}{
		{"bouncer", func(t *testing.T) *pgxpool.Pool { return pgtest.BouncerPool(t) }, 1},
		{"direct", func(t *testing.T) *pgxpool.Pool { return pgtest.Pool(t) }, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := otelxtest.New(t)
			pool := c.pool(t)
			holder := newClient(t, pool)
			waiter := newClient(t, pool, pglease.WithWakeOnRelease(), pglease.WithMeterProvider(r.Provider))
			key := uniqueKey(t)
			if _, err := holder.TryAcquire(context.Background(), key, time.Minute); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				_, err := waiter.Acquire(ctx, key, time.Minute)
				cancel()
				if err == nil {
					t.Fatal("acquired a held key")
				}
			}
			if got := listenDisabled(t, r, c.want); got != c.want {
				t.Fatalf("pgfence.listen.disabled = %v, want %v", got, c.want)
			}
		})
	}
}

// A claim Runner with WithListen behind PgBouncer in transaction mode counts
// its listener in pgfence.listen.disabled, under its queue.
func TestMetricsRunnerListenDisabled(t *testing.T) {
	t.Parallel()
	r := otelxtest.New(t)
	pool := pgtest.BouncerPool(t)
	qn := queue("listen-disabled")
	c := newClaimer(t, pool, qn, claim.WithMeterProvider(r.Provider))
	rn, err := claim.NewRunner(c, func(context.Context, *claim.Job) error { return nil },
		claim.WithListen("pgfence_metrics_listen"), claim.WithPollInterval(50*time.Millisecond), claim.WithRescueInterval(-1))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rn.Run(ctx) }()
	got := listenDisabled(t, r, 1, attribute.String("queue", qn))
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got != 1 {
		t.Fatalf("pgfence.listen.disabled{queue=%s} = %v, want 1", qn, got)
	}
}
