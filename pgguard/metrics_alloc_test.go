package pgguard

import (
	"testing"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// With a no-op provider, or the global one while the application has set
// none, counting a guarded write costs no allocation.
func TestMetricsNoAllocsWithoutProvider(t *testing.T) {
	for name, mp := range map[string]metric.MeterProvider{"noop": noop.NewMeterProvider(), "global": nil} {
		g := newGuardMetrics(options{meterProvider: mp}, "public.t")
		stale := &StaleFenceError{Table: "public.t"}
		allocs := testing.AllocsPerRun(100, func() {
			g.wrote(opUpdate, nil)
			g.wrote(opClaim, stale)
		})
		if allocs != 0 {
			t.Errorf("%s provider: %v allocations, want 0", name, allocs)
		}
	}
}
