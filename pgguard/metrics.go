package pgguard

import (
	"context"
	"errors"
	"reflect"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/otelx"
)

// WithMeterProvider sets where OpenTelemetry metrics of guarded writes and
// stale refusals go (the instruments are listed in
// docs/metrics.md). Default: the global provider, otel.GetMeterProvider(), which
// records nothing until the application sets one. pgguard imports only the
// OpenTelemetry API; bring the SDK and an exporter yourself.
//
// Applies to NewGuard and RunFenced.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return Option{"WithMeterProvider", callsCounting, func(o *options) error {
		if mp == nil {
			return invalid("nil meter provider")
		}
		o.meterProvider = mp
		return nil
	}}
}

const meterName = "github.com/pgfence/pgfence/pgguard"

// instruments are the package's instruments on one provider.
type instruments struct {
	writes metric.Int64Counter
	stale  metric.Int64Counter
}

// byProvider caches the instruments per provider: options are built per
// call for RunFenced and SetFence, and a meter lookup per call would cost.
var byProvider sync.Map // metric.MeterProvider (or nil for the global one) -> *instruments

func instrumentsFor(mp metric.MeterProvider) *instruments {
	cacheable := mp == nil || reflect.TypeOf(mp).Comparable()
	if cacheable {
		if in, ok := byProvider.Load(mp); ok {
			return in.(*instruments)
		}
	}
	m := otelx.Meter(mp, meterName)
	in := &instruments{
		writes: otelx.Must(m.Int64Counter("pgfence.guard.writes", metric.WithUnit("{write}"),
			metric.WithDescription("A Guard's Update and Claim calls by table, op (update, claim) and outcome (applied, stale, precondition, done, no_row, error)."))),
		stale: otelx.Must(m.Int64Counter("pgfence.guard.stale", metric.WithUnit("{write}"),
			metric.WithDescription("Stale writes refused, by table: every refusal the Counter records (Guard, Payouts, RunFenced, fencing trigger)."))),
	}
	if cacheable {
		actual, _ := byProvider.LoadOrStore(mp, in)
		return actual.(*instruments)
	}
	return in
}

// Outcomes of a guarded write (attribute outcome of pgfence.guard.writes).
const (
	outApplied = iota
	outStale
	outPrecondition
	outDone
	outNoRow
	outError
	nOutcomes
)

var outcomeNames = [nOutcomes]string{"applied", "stale", "precondition", "done", "no_row", "error"}

const (
	opUpdate = iota
	opClaim
)

// guardMetrics are a Guard's instruments with its attribute sets built once.
type guardMetrics struct {
	in    *instruments
	attrs [2][nOutcomes]otelx.Attrs // op, outcome
}

func newGuardMetrics(o options, table string) *guardMetrics {
	g := &guardMetrics{in: instrumentsFor(o.meterProvider)}
	t := attribute.String("table", table)
	for op, opName := range [2]string{"update", "claim"} {
		for out, outName := range outcomeNames {
			g.attrs[op][out] = otelx.NewAttrs(t, attribute.String("op", opName), attribute.String("outcome", outName))
		}
	}
	return g
}

// wrote records one guarded write (op) that returned err.
func (g *guardMetrics) wrote(op int, err error) {
	out := outApplied
	switch {
	case err == nil:
	case errors.Is(err, ErrStaleFence):
		out = outStale
	case errors.Is(err, ErrAlreadyDone):
		out = outDone
	case errors.Is(err, ErrPrecondition):
		out = outPrecondition
	case errors.Is(err, pgfence.ErrNotFound):
		out = outNoRow
	default:
		out = outError
	}
	g.in.writes.Add(context.Background(), 1, g.attrs[op][out].Add...)
}

// countStale records a stale refusal of e's table.
func (o *options) countStale(ctx context.Context, e *StaleFenceError) {
	st := instrumentsFor(o.meterProvider).stale
	if st.Enabled(ctx) {
		st.Add(ctx, 1, metric.WithAttributes(attribute.String("table", e.Table)))
	}
}
