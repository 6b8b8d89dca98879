package pglease

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/keepalive"
	"github.com/pgfence/pgfence/internal/otelx"
)

// WithMeterProvider sets where the client's OpenTelemetry metrics go (the
// instruments are listed in docs/metrics.md). Default: the
// global provider, otel.GetMeterProvider(), which records nothing until the
// application sets one. pglease imports only the OpenTelemetry API; bring
// the SDK and an exporter yourself.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) error {
		if mp == nil {
			return invalid("nil meter provider")
		}
		c.meterProvider = mp
		return nil
	}
}

const meterName = "github.com/pgfence/pgfence/pglease"

// Attribute values; the index order of the attrs arrays below.
const (
	opTry = iota
	opWait
)

const (
	outGranted = iota
	outRefused
	outError
)

// metrics are a client's instruments, with every attribute set built once:
// with the default no-op provider a measurement costs a call and nothing
// else.
type metrics struct {
	acqDuration metric.Float64Histogram
	acquisitons metric.Int64Counter
	waited      metric.Float64Counter
	held        metric.Int64UpDownCounter
	heldFor     metric.Float64Histogram
	lostCount   metric.Int64Counter
	renewFails  metric.Int64Counter
	resolutions metric.Int64Counter
	resolveTime metric.Float64Histogram

	acq        [2][3]otelx.Attrs                // op, outcome
	lostAttrs  [keepalive.NumCauses]otelx.Attrs // attribute cause of pgfence.lease.lost
	resAttrs   [numResolved][2]otelx.Attrs      // outcome, where (caller, background)
	none       otelx.Attrs
	unregister func() // the pool's observable instruments
}

func newMetrics(mp metric.MeterProvider, pool *pgxpool.Pool) *metrics {
	m := otelx.Meter(mp, meterName)
	met := &metrics{
		acqDuration: otelx.Must(m.Float64Histogram("pgfence.lease.acquire.duration", metric.WithUnit("s"),
			metric.WithDescription("Duration of TryAcquire and Acquire calls, by op (try, wait) and outcome (granted, refused, error)."),
			metric.WithExplicitBucketBoundaries(otelx.LatencyBuckets...))),
		acquisitons: otelx.Must(m.Int64Counter("pgfence.lease.acquisitions", metric.WithUnit("{call}"),
			metric.WithDescription("TryAcquire and Acquire calls by op and outcome: one per call, not per attempt."))),
		waited: otelx.Must(m.Float64Counter("pgfence.lease.wait.duration", metric.WithUnit("s"),
			metric.WithDescription("Total time Acquire calls spent until they returned."))),
		held: otelx.Must(m.Int64UpDownCounter("pgfence.lease.held", metric.WithUnit("{lease}"),
			metric.WithDescription("Leases held by this process now."))),
		heldFor: otelx.Must(m.Float64Histogram("pgfence.lease.held.duration", metric.WithUnit("s"),
			metric.WithDescription("How long each lease was held, from its acquisition to its release or loss."),
			metric.WithExplicitBucketBoundaries(otelx.HeldBuckets...))),
		lostCount: otelx.Must(m.Int64Counter("pgfence.lease.lost", metric.WithUnit("{lease}"),
			metric.WithDescription("Leases lost, by cause (expired, taken_over, local_deadline, release_failed, unknown)."))),
		renewFails: otelx.Must(m.Int64Counter("pgfence.lease.renew.failures", metric.WithUnit("{renewal}"),
			metric.WithDescription("Auto-renewal attempts that failed transiently."))),
	}
	met.resolutions = otelx.Must(m.Int64Counter("pgfence.lease.ambiguous.resolutions", metric.WithUnit("{acquisition}"),
		metric.WithDescription("Acquisitions whose answer was lost, by how they were settled (outcome: adopted, given_back, failed) and where "+
			"(caller: within the caller's context; background: after the caller returned). failed: the grant, if any, expires at its TTL.")))
	met.resolveTime = otelx.Must(m.Float64Histogram("pgfence.lease.ambiguous.resolution.duration", metric.WithUnit("s"),
		metric.WithDescription("From the loss of an acquisition's answer to its settlement, by outcome and where."),
		metric.WithExplicitBucketBoundaries(otelx.LatencyBuckets...)))
	resOuts := [numResolved]string{"adopted", "given_back", "failed"}
	for o := range resOuts {
		for w, where := range [2]string{"caller", "background"} {
			met.resAttrs[o][w] = otelx.NewAttrs(attribute.String("outcome", resOuts[o]), attribute.String("where", where))
		}
	}
	ops := [2]string{"try", "wait"}
	outs := [3]string{"granted", "refused", "error"}
	for o := range ops {
		for r := range outs {
			met.acq[o][r] = otelx.NewAttrs(attribute.String("op", ops[o]), attribute.String("outcome", outs[r]))
		}
	}
	for c := range keepalive.NumCauses {
		met.lostAttrs[c] = otelx.NewAttrs(attribute.String("cause", c.String()))
	}
	met.none = otelx.NewAttrs()
	met.unregister = otelx.PoolStats(m, pool)
	return met
}

func (m *metrics) close() { m.unregister() }

// acquired records one TryAcquire (op opTry) or Acquire call that started
// at start and returned err.
func (m *metrics) acquired(op int, start time.Time, err error) {
	out := outGranted
	switch {
	case err == nil:
	case errors.Is(err, pgfence.ErrNotAcquired):
		out = outRefused
	default:
		out = outError
	}
	a := &m.acq[op][out]
	d := time.Since(start).Seconds()
	ctx := context.Background()
	m.acqDuration.Record(ctx, d, a.Rec...)
	m.acquisitons.Add(ctx, 1, a.Add...)
	if op == opWait {
		m.waited.Add(ctx, d, m.none.Add...)
	}
}

// Outcomes of an acquisition whose answer was lost (metric
// pgfence.lease.ambiguous.resolutions).
const (
	resAdopted   = iota // granted, and kept by its caller
	resGivenBack        // tombstoned, and released if it was granted
	resFailed           // the server could not be reached within resolveBound
	numResolved
)

// resolved records one ambiguous acquisition settled with outcome, in the
// background or not, whose answer was lost at lost.
func (m *metrics) resolved(outcome int, background bool, lost time.Time) {
	w := 0
	if background {
		w = 1
	}
	a := &m.resAttrs[outcome][w]
	ctx := context.Background()
	m.resolutions.Add(ctx, 1, a.Add...)
	m.resolveTime.Record(ctx, time.Since(lost).Seconds(), a.Rec...)
}

func (m *metrics) leaseStarted() { m.held.Add(context.Background(), 1, m.none.Add...) }

func (m *metrics) renewFailed() { m.renewFails.Add(context.Background(), 1, m.none.Add...) }

// ended records the end of l, held since start; lost with cause unless
// cause is keepalive.NotLost (released).
func (m *metrics) ended(l *Lease, cause keepalive.Cause) {
	ctx := context.Background()
	if cause != keepalive.NotLost {
		m.lostCount.Add(ctx, 1, m.lostAttrs[cause].Add...)
	}
	m.heldFor.Record(ctx, time.Since(l.start).Seconds(), m.none.Rec...)
	m.held.Add(ctx, -1, m.none.Add...) // last: once held is back down, the rest is recorded
}

// lostAtDeadline records l lost when its local deadline passed: to a failed
// release if Release had begun, else to the deadline.
func (l *Lease) lostAtDeadline() {
	l.mu.Lock()
	cause := keepalive.LocalDeadline
	if l.stopping {
		cause = keepalive.ReleaseFailed
	}
	l.mu.Unlock()
	l.c.met.ended(l, cause)
}

// lostOnRenew records l lost when a renewal found no lease. The renewal
// cannot tell an expired lease from one another owner took; when metrics are
// recorded, one read of the key's fence tells (as Release does).
func (l *Lease) lostOnRenew(ctx context.Context) {
	m := l.c.met
	cause := keepalive.Gone // unless the check below tells which way
	if m.lostCount.Enabled(ctx) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		current, err := l.c.queries(rctx).LeaseFence(rctx, l.key)
		cancel()
		switch {
		case errors.Is(err, pgx.ErrNoRows) || (err == nil && current == l.fence):
			cause = keepalive.Expired // swept, or still ours but expired
		case err == nil:
			cause = keepalive.TakenOver
		}
	}
	m.ended(l, cause)
}

// endedAtRelease records the end of l by Release: released, or found lost
// (taken by another owner, or expired).
func (l *Lease) endedAtRelease(released, taken bool) {
	switch {
	case taken:
		l.c.met.ended(l, keepalive.TakenOver)
	case !released:
		l.c.met.ended(l, keepalive.Expired)
	default:
		l.c.met.ended(l, keepalive.NotLost)
	}
}
