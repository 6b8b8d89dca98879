package watch

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// meterName is the instrumentation scope of serve's instruments.
const meterName = "github.com/pgfence/pgfence/cmd/pgfence/serve"

// Metrics is the /metrics endpoint: OpenTelemetry observable instruments
// whose callback reports the Watcher's latest snapshot, exported in the
// Prometheus text format by the OpenTelemetry Prometheus exporter.
type Metrics struct {
	provider *sdkmetric.MeterProvider
	handler  http.Handler
}

// NewMetrics registers serve's instruments on a MeterProvider of its own,
// exported through a Prometheus registry of its own (no Go runtime or
// process collectors: only pgfence's figures). Close it when done.
func NewMetrics(w *Watcher) (*Metrics, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		return nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	if err := register(mp.Meter(meterName), w); err != nil {
		mp.Shutdown(context.Background())
		return nil, err
	}
	return &Metrics{provider: mp, handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}, nil
}

// ServeHTTP serves the Prometheus exposition.
func (m *Metrics) ServeHTTP(rw http.ResponseWriter, r *http.Request) { m.handler.ServeHTTP(rw, r) }

// Close shuts the MeterProvider down.
func (m *Metrics) Close() error { return m.provider.Shutdown(context.Background()) }

// register creates the instruments and the one callback that observes them
// all from one snapshot. The names, units and attributes are listed in the
// package documentation.
func register(m metric.Meter, w *Watcher) error {
	up, err := m.Int64ObservableGauge("pgfence_serve_database_up",
		metric.WithDescription("1 when the latest read of the database succeeded, 0 when it failed"))
	if err != nil {
		return err
	}
	age, err := m.Float64ObservableGauge("pgfence_serve_snapshot_age", metric.WithUnit("s"),
		metric.WithDescription("Age of the snapshot the other figures come from"))
	if err != nil {
		return err
	}
	held, err := m.Int64ObservableGauge("pgfence_leases_held", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases unexpired by the database clock"))
	if err != nil {
		return err
	}
	soon, err := m.Int64ObservableGauge("pgfence_leases_expiring_soon", metric.WithUnit("{lease}"),
		metric.WithDescription("Held leases that expire within the --soon horizon (default 5s) unless renewed"))
	if err != nil {
		return err
	}
	fence, err := m.Float64ObservableGauge("pgfence_lease_fence",
		metric.WithDescription("Fence of a held lease, by key and owner; at most --limit keys (default 100), the first in key order"))
	if err != nil {
		return err
	}
	jobs, err := m.Int64ObservableGauge("pgfence_jobs", metric.WithUnit("{job}"),
		metric.WithDescription("Rows of pgfence_jobs by queue and state"))
	if err != nil {
		return err
	}
	oldest, err := m.Float64ObservableGauge("pgfence_jobs_oldest_runnable_age", metric.WithUnit("s"),
		metric.WithDescription("How long the oldest runnable job of a queue has been runnable, by the database clock"))
	if err != nil {
		return err
	}
	stale, err := m.Int64ObservableCounter("pgfence_stale_refusals", metric.WithUnit("{refusal}"),
		metric.WithDescription("Stale writes refused by the fencing trigger (sequence pgfence_stale_refusals); absent when the sequence is"))
	if err != nil {
		return err
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s, a, errText := w.Latest()
		if errText != "" {
			o.ObserveInt64(up, 0)
		} else {
			o.ObserveInt64(up, 1)
		}
		if s == nil || errText != "" {
			return nil // figures of a failed read are absent, not stale
		}
		o.ObserveFloat64(age, a.Seconds())
		o.ObserveInt64(held, s.Leases.Held)
		o.ObserveInt64(soon, s.Leases.ExpiringSoon)
		for _, l := range s.Leases.List {
			// A float64 holds a fence exactly below 2^53, i.e. for WAL
			// timelines below 512.
			o.ObserveFloat64(fence, float64(l.Fence), metric.WithAttributes(
				attribute.String("key", l.Key), attribute.String("owner", l.Owner)))
		}
		for _, q := range s.Queues {
			for state, n := range q.Counts {
				o.ObserveInt64(jobs, n, metric.WithAttributes(
					attribute.String("queue", q.Name), attribute.String("state", state)))
			}
			if q.OldestRunnableSeconds != nil {
				o.ObserveFloat64(oldest, *q.OldestRunnableSeconds, metric.WithAttributes(attribute.String("queue", q.Name)))
			}
		}
		if s.Stale.Present {
			o.ObserveInt64(stale, s.Stale.Count)
		}
		return nil
	}, up, age, held, soon, fence, jobs, oldest, stale)
	return err
}
