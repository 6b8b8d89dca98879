package claim

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/pgfence/pgfence/internal/pgdb"
)

// With a no-op provider, or the global one while the application has set
// none, recording costs no allocation.
func TestMetricsNoAllocsWithoutProvider(t *testing.T) {
	// Never connects: the no-op provider never runs the queue-depth callback.
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for name, mp := range map[string]metric.MeterProvider{"noop": noop.NewMeterProvider(), "global": nil} {
		cfg := defaultConfig()
		cfg.meterProvider = mp
		m := newMetrics(&Claimer{pool: pool, db: pgdb.Wrap(pool, ""), cfg: cfg})
		j, k := &Job{}, &Job{}
		allocs := testing.AllocsPerRun(100, func() {
			j.counted.Store(false)
			k.counted.Store(false)
			m.claimed(3)
			m.completed(j)
			m.failed(true)
			m.leaseLost(opFail)
			m.rescued(1, 1)
			m.batchCompleted(k, nil)
		})
		if allocs != 0 {
			t.Errorf("%s provider: %v allocations, want 0", name, allocs)
		}
	}
}
