package otelx

import (
	"context"
	"fmt"
	"reflect"
	"runtime/debug"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

const module = "github.com/pgfence/pgfence"

// version is pgfence's module version from the build info, "" when unknown
// (tests, a replace without a version).
var version = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	if bi.Main.Path == module {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == module {
			return d.Version
		}
	}
	return ""
})

// Meter is the meter of the package at importPath on mp; a nil mp means the
// global provider (otel.GetMeterProvider), a no-op until the application
// sets one.
func Meter(mp metric.MeterProvider, importPath string) metric.Meter {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	var opts []metric.MeterOption
	if v := version(); v != "" && v != "(devel)" {
		opts = append(opts, metric.WithInstrumentationVersion(v))
	}
	return mp.Meter(importPath, opts...)
}

// Attrs is one attribute set as ready options, built once so that a
// measurement allocates nothing (a variadic option built per call would).
type Attrs struct {
	Add []metric.AddOption
	Rec []metric.RecordOption
}

// NewAttrs builds the options for kv.
func NewAttrs(kv ...attribute.KeyValue) Attrs {
	o := metric.WithAttributeSet(attribute.NewSet(kv...))
	return Attrs{Add: []metric.AddOption{o}, Rec: []metric.RecordOption{o}}
}

// Must drops an instrument constructor's error: the API returns a working
// (no-op at worst) instrument with it, and the names here are constants that
// are valid; otel.Handle reports it anyway.
func Must[T any](inst T, err error) T {
	if err != nil {
		otel.Handle(err)
	}
	return inst
}

// Latency buckets (seconds) for acquisitions and waits: from a fast round
// trip to a minute.
var LatencyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// HeldBuckets (seconds) for how long a lease was held: a second to a day.
var HeldBuckets = []float64{0.01, 0.1, 1, 5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 24 * 3600}

// registry makes one callback per (meter, key): two clients on one pool (or
// two claimers on one queue) would otherwise observe the same attribute set
// twice.
var registry = struct {
	sync.Mutex
	m map[sharedKey]*sharedEntry
}{m: map[sharedKey]*sharedEntry{}}

type sharedKey struct {
	meter metric.Meter
	key   any
}

type sharedEntry struct {
	refs int
	reg  metric.Registration
}

// Shared calls register (which registers a callback on meter) unless a
// registration for the same meter and key is alive, and returns the function
// that gives this use up; the last one unregisters. Call it once. key must be
// comparable.
func Shared(meter metric.Meter, key any, register func() metric.Registration) func() {
	if !reflect.TypeOf(meter).Comparable() {
		reg := register()
		var once sync.Once
		return func() { once.Do(func() { unregister(reg) }) }
	}
	k := sharedKey{meter, key}
	registry.Lock()
	defer registry.Unlock()
	e := registry.m[k]
	if e == nil {
		e = &sharedEntry{reg: register()}
		registry.m[k] = e
	}
	e.refs++
	var once sync.Once
	return func() {
		once.Do(func() {
			registry.Lock()
			defer registry.Unlock()
			if e.refs--; e.refs == 0 {
				delete(registry.m, k)
				unregister(e.reg)
			}
		})
	}
}

// PoolStats registers observable instruments (pgfence.db.pool.*) that read
// pool.Stat() at each collection, under the attribute db.pool
// (host:port/database). The returned function unregisters them; call it once.
// Registrations of the same pool on the same meter share one callback.
func PoolStats(meter metric.Meter, pool *pgxpool.Pool) func() {
	return Shared(meter, pool, func() metric.Registration { return registerPool(meter, pool) })
}

func unregister(reg metric.Registration) {
	if reg != nil {
		if err := reg.Unregister(); err != nil {
			otel.Handle(err)
		}
	}
}

func poolName(pool *pgxpool.Pool) string {
	cc := pool.Config().ConnConfig
	return fmt.Sprintf("%s:%d/%s", cc.Host, cc.Port, cc.Database)
}

func registerPool(meter metric.Meter, pool *pgxpool.Pool) metric.Registration {
	name := attribute.String("db.pool", poolName(pool))
	waited := Must(meter.Float64ObservableCounter("pgfence.db.pool.acquire.wait",
		metric.WithUnit("s"), metric.WithDescription("Time spent waiting for a connection because the pool had none idle (pgxpool EmptyAcquireWaitTime).")))
	acqDur := Must(meter.Float64ObservableCounter("pgfence.db.pool.acquire.duration",
		metric.WithUnit("s"), metric.WithDescription("Time spent in successful connection acquisitions, waiting or not (pgxpool AcquireDuration).")))
	acqs := Must(meter.Int64ObservableCounter("pgfence.db.pool.acquires",
		metric.WithUnit("{acquire}"), metric.WithDescription("Successful connection acquisitions (pgxpool AcquireCount).")))
	empty := Must(meter.Int64ObservableCounter("pgfence.db.pool.acquires.empty",
		metric.WithUnit("{acquire}"), metric.WithDescription("Acquisitions that had to wait because no connection was idle (pgxpool EmptyAcquireCount).")))
	canceled := Must(meter.Int64ObservableCounter("pgfence.db.pool.acquires.canceled",
		metric.WithUnit("{acquire}"), metric.WithDescription("Acquisitions abandoned because their context ended (pgxpool CanceledAcquireCount).")))
	conns := Must(meter.Int64ObservableGauge("pgfence.db.pool.connections",
		metric.WithUnit("{connection}"), metric.WithDescription("The pool's connections by state: acquired, idle, constructing.")))
	maxConns := Must(meter.Int64ObservableGauge("pgfence.db.pool.connections.max",
		metric.WithUnit("{connection}"), metric.WithDescription("The pool's maximum size (MaxConns).")))
	base := metric.WithAttributeSet(attribute.NewSet(name))
	state := func(s string) metric.ObserveOption {
		return metric.WithAttributeSet(attribute.NewSet(name, attribute.String("state", s)))
	}
	acquired, idle, constructing := state("acquired"), state("idle"), state("constructing")
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := pool.Stat()
		o.ObserveFloat64(waited, s.EmptyAcquireWaitTime().Seconds(), base)
		o.ObserveFloat64(acqDur, s.AcquireDuration().Seconds(), base)
		o.ObserveInt64(acqs, s.AcquireCount(), base)
		o.ObserveInt64(empty, s.EmptyAcquireCount(), base)
		o.ObserveInt64(canceled, s.CanceledAcquireCount(), base)
		o.ObserveInt64(conns, int64(s.AcquiredConns()), acquired)
		o.ObserveInt64(conns, int64(s.IdleConns()), idle)
		o.ObserveInt64(conns, int64(s.ConstructingConns()), constructing)
		o.ObserveInt64(maxConns, int64(s.MaxConns()), base)
		return nil
	}, waited, acqDur, acqs, empty, canceled, conns, maxConns)
	if err != nil {
		otel.Handle(err)
		return nil
	}
	return reg
}

// ListenDisabled is pgfence.listen.disabled on meter: pglease's and claim's
// listeners count themselves in it when they find a transaction pooler in
// front of PostgreSQL (internal/listen) and so never LISTEN.
func ListenDisabled(meter metric.Meter) metric.Int64Counter {
	return Must(meter.Int64Counter("pgfence.listen.disabled", metric.WithUnit("{listener}"),
		metric.WithDescription("Listeners (pglease's WithWakeOnRelease, a claim Runner's WithListen) that found a transaction "+
			"or statement pooler in front of PostgreSQL and send no LISTEN, so their waiters poll: give WithWakeOnRelease or WithListen a listen pool that connects directly.")))
}
