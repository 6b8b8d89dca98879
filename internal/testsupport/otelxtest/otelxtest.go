// Package otelxtest reads what instruments recorded, for tests: a
// MeterProvider of the OpenTelemetry SDK with a ManualReader. Only tests
// import it, so the SDK never reaches a user's build.
package otelxtest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Reader collects from its own provider.
type Reader struct {
	t        testing.TB
	reader   *sdkmetric.ManualReader
	Provider *sdkmetric.MeterProvider
}

// New returns a reader whose provider is shut down with the test.
func New(t testing.TB) *Reader {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	return &Reader{t: t, reader: r, Provider: mp}
}

// Snapshot is one collection, by instrument name.
type Snapshot map[string]metricdata.Metrics

// Collect runs one collection.
func (r *Reader) Collect() Snapshot {
	r.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		r.t.Fatalf("collect: %v", err)
	}
	s := Snapshot{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			s[m.Name] = m
		}
	}
	return s
}

func match(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// Unit is the unit of name, "" if it was not recorded.
func (s Snapshot) Unit(name string) string { return s[name].Unit }

// Has reports whether name was collected.
func (s Snapshot) Has(name string) bool { _, ok := s[name]; return ok }

// Value sums name's data points whose attributes include attrs: the value
// of sums and gauges, the count of histograms.
func (s Snapshot) Value(name string, attrs ...attribute.KeyValue) float64 {
	var total float64
	switch d := s[name].Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			if match(p.Attributes, attrs) {
				total += float64(p.Value)
			}
		}
	case metricdata.Sum[float64]:
		for _, p := range d.DataPoints {
			if match(p.Attributes, attrs) {
				total += p.Value
			}
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			if match(p.Attributes, attrs) {
				total += float64(p.Value)
			}
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			if match(p.Attributes, attrs) {
				total += p.Value
			}
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			if match(p.Attributes, attrs) {
				total += float64(p.Count)
			}
		}
	}
	return total
}
