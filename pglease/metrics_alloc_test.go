package pglease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/pgfence/pgfence/internal/keepalive"
)

// With a no-op provider, or the global one while the application has set
// none, recording costs no allocation on the paths every acquisition takes.
func TestMetricsNoAllocsWithoutProvider(t *testing.T) {
	// Never connects: nothing is acquired from it.
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for name, mp := range map[string]metric.MeterProvider{"noop": noop.NewMeterProvider(), "global": nil} {
		m := newMetrics(mp, pool)
		l := &Lease{start: time.Now()}
		refused := errors.New("x")
		allocs := testing.AllocsPerRun(100, func() {
			start := time.Now()
			m.acquired(opTry, start, nil)
			m.acquired(opWait, start, refused)
			m.leaseStarted()
			m.renewFailed()
			m.ended(l, keepalive.NotLost)
			m.ended(l, keepalive.Expired)
		})
		m.close()
		if allocs != 0 {
			t.Errorf("%s provider: %v allocations per acquisition's measurements, want 0", name, allocs)
		}
	}
}
