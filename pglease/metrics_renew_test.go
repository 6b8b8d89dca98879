package pglease

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// countingProvider counts what is added to one Int64Counter, by name; every
// other instrument is a no-op. (The SDK-backed tests of every instrument are
// in internal/otelx/metricstest; this one needs the renew hook.)
type countingProvider struct {
	noop.MeterProvider
	name string
	n    *atomic.Int64
}

func (p countingProvider) Meter(string, ...metric.MeterOption) metric.Meter {
	return countingMeter{name: p.name, n: p.n}
}

type countingMeter struct {
	noop.Meter
	name string
	n    *atomic.Int64
}

func (m countingMeter) Int64Counter(name string, _ ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	if name == m.name {
		return countingCounter{n: m.n}, nil
	}
	return noop.Int64Counter{}, nil
}

type countingCounter struct {
	noop.Int64Counter
	n *atomic.Int64
}

func (c countingCounter) Add(_ context.Context, v int64, _ ...metric.AddOption) { c.n.Add(v) }
func (c countingCounter) Enabled(context.Context) bool                          { return true }

// Auto-renewals that fail transiently are counted.
func TestMetricsRenewFailures(t *testing.T) {
	ctx := context.Background()
	var n atomic.Int64
	c, err := New(pgtest.Pool(t), WithMeterProvider(countingProvider{name: "pgfence.lease.renew.failures", n: &n}),
		WithRenewInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.renewHook = func(context.Context, *Lease) (time.Time, error) {
		return time.Time{}, errors.New("injected renewal failure")
	}
	// The TTL leaves the first renewal (due at 20 ms) time to fail before
	// the local deadline (1.8 s), however busy the machine is.
	l, err := c.TryAcquire(ctx, "metrics-renew-"+t.Name(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	<-l.Context().Done() // lost at the local deadline
	if got := n.Load(); got < 1 {
		t.Errorf("renew.failures = %d, want at least 1", got)
	}
}
