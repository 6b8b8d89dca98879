package claim

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/otelx"
	"github.com/pgfence/pgfence/internal/pgdb"
)

// defaultQueueStatsInterval is how often, at most, the queue-depth gauges
// query the table; collections in between report the last answer.
const defaultQueueStatsInterval = 5 * time.Second

// queueStatsTimeout bounds the queue-depth query, so that a slow database
// never holds up a collection for longer.
const queueStatsTimeout = 2 * time.Second

// WithMeterProvider sets where the claimer's OpenTelemetry metrics go (the
// instruments are listed in docs/metrics.md). Default: the
// global provider, otel.GetMeterProvider(), which records nothing (and never
// runs the queue-depth query) until the application sets one. claim imports
// only the OpenTelemetry API; bring the SDK and an exporter yourself.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return claimerOption("WithMeterProvider", func(c *config) error {
		if mp == nil {
			return invalid("nil meter provider")
		}
		c.meterProvider = mp
		return nil
	})
}

// WithQueueStatsInterval sets how often, at most, the observable gauges
// pgfence.job.queue.depth and pgfence.job.oldest_runnable.age query the
// table (one aggregate over the queue's available and running rows).
// Default: 5s.
func WithQueueStatsInterval(d time.Duration) Option {
	return claimerOption("WithQueueStatsInterval", func(c *config) error {
		if d <= 0 {
			return invalid("queue stats interval must be positive, got %v", d)
		}
		c.queueStatsEvery = d
		return nil
	})
}

const meterName = "github.com/pgfence/pgfence/claim"

// Which write found a job's lease lost (attribute op of pgfence.job.lease_lost).
const (
	opComplete = iota
	opFail
	opRelease
)

// metrics are a claimer's instruments, with every attribute set built once.
type metrics struct {
	claimedN, completedN, failedN, rescuedN, lostN metric.Int64Counter
	listenDisabled                                 metric.Int64Counter

	queue                   otelx.Attrs
	failRetry, failDead     otelx.Attrs
	rescueAvail, rescueDead otelx.Attrs
	lostOps                 [3]otelx.Attrs
}

func newMetrics(c *Claimer) *metrics {
	m := otelx.Meter(c.cfg.meterProvider, meterName)
	counter := func(name, desc string) metric.Int64Counter {
		return otelx.Must(m.Int64Counter(name, metric.WithUnit("{job}"), metric.WithDescription(desc)))
	}
	q := attribute.String("queue", c.queueName())
	out := func(v string) otelx.Attrs { return otelx.NewAttrs(q, attribute.String("outcome", v)) }
	op := func(v string) otelx.Attrs { return otelx.NewAttrs(q, attribute.String("op", v)) }
	met := &metrics{
		claimedN:       counter("pgfence.job.claimed", "Jobs claimed."),
		completedN:     counter("pgfence.job.completed", "Completions accepted, once per Job (CompleteTx: before the caller's commit)."),
		failedN:        counter("pgfence.job.failed", "Failed attempts recorded, by outcome: retry or dead."),
		rescuedN:       counter("pgfence.job.rescued", "Jobs whose lease expired, taken back by Rescue, by outcome: requeued or dead."),
		lostN:          counter("pgfence.job.lease_lost", "Completions, failures and releases refused because the job's lease was lost, by op (complete also counts a Runner handler that returned nil after its lease was lost: no completion is sent)."),
		listenDisabled: otelx.ListenDisabled(m),
		queue:          otelx.NewAttrs(q),
		failRetry:      out("retry"), failDead: out("dead"),
		rescueAvail: out("requeued"), rescueDead: out("dead"),
		lostOps: [3]otelx.Attrs{op("complete"), op("fail"), op("release")},
	}
	every := c.cfg.queueStatsEvery
	if every <= 0 {
		every = defaultQueueStatsInterval
	}
	qs := &queueStats{db: c.db, sql: c.sql.queueStats, args: c.queueArgs(), every: every, logger: c.cfg.logger}
	key := queueKey{pool: c.pool, table: c.cfg.table.ident(), queue: c.queueName()}
	stopQueue := otelx.Shared(m, key, func() metric.Registration { return qs.register(m, q) })
	stopPool := otelx.PoolStats(m, c.pool)
	// A Claimer has no Close: its callbacks end when it is collected. They
	// reference the pool and qs, never c, so c can be collected.
	runtime.AddCleanup(c, func(stops [2]func()) { stops[0](); stops[1]() }, [2]func(){stopQueue, stopPool})
	return met
}

type queueKey struct {
	pool         *pgxpool.Pool
	table, queue string
}

func (m *metrics) claimed(n int) {
	if n > 0 {
		m.claimedN.Add(context.Background(), int64(n), m.queue.Add...)
	}
}

// completed counts j's completion once, however often it is completed
// again (a retry after a lost answer, a caller completing twice).
func (m *metrics) completed(j *Job) {
	if j.counted.CompareAndSwap(false, true) {
		m.completedN.Add(context.Background(), 1, m.queue.Add...)
	}
}

func (m *metrics) failed(dead bool) {
	a := &m.failRetry
	if dead {
		a = &m.failDead
	}
	m.failedN.Add(context.Background(), 1, a.Add...)
}

// listenPooled counts a Runner's listener that found a transaction pooler.
func (m *metrics) listenPooled() { m.listenDisabled.Add(context.Background(), 1, m.queue.Add...) }

func (m *metrics) leaseLost(op int) { m.lostN.Add(context.Background(), 1, m.lostOps[op].Add...) }

func (m *metrics) rescued(requeued, dead int64) {
	ctx := context.Background()
	if requeued > 0 {
		m.rescuedN.Add(ctx, requeued, m.rescueAvail.Add...)
	}
	if dead > 0 {
		m.rescuedN.Add(ctx, dead, m.rescueDead.Add...)
	}
}

// batchCompleted records one job's result of a batched completion (Runner):
// nil is a completion, pgfence.ErrLeaseLost a refusal; a write error is neither.
func (m *metrics) batchCompleted(j *Job, err error) {
	switch {
	case err == nil:
		m.completed(j)
	case errors.Is(err, pgfence.ErrLeaseLost):
		m.leaseLost(opComplete)
	}
}

// queueStats caches the queue-depth query's answer for every.
type queueStats struct {
	db     pgdb.DB // the claimer's
	sql    string
	args   []any
	every  time.Duration
	logger *slog.Logger

	mu               sync.Mutex
	at               time.Time // of the last query, answered or not
	ok               bool      // the last query answered
	available, runng int64
	age              float64
}

func (q *queueStats) register(m metric.Meter, queue attribute.KeyValue) metric.Registration {
	depth := otelx.Must(m.Int64ObservableGauge("pgfence.job.queue.depth", metric.WithUnit("{job}"),
		metric.WithDescription("Jobs in the queue by state (available, running), read at most every WithQueueStatsInterval.")))
	age := otelx.Must(m.Float64ObservableGauge("pgfence.job.oldest_runnable.age", metric.WithUnit("s"),
		metric.WithDescription("How long the oldest runnable job has been runnable (now - run_at); 0 when none is.")))
	avail := metric.WithAttributeSet(attribute.NewSet(queue, attribute.String("state", "available")))
	running := metric.WithAttributeSet(attribute.NewSet(queue, attribute.String("state", "running")))
	base := metric.WithAttributeSet(attribute.NewSet(queue))
	reg, err := m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		a, r, oldest, ok := q.read(ctx)
		if !ok {
			return nil // no answer: a gap in the series, not a made-up zero
		}
		o.ObserveInt64(depth, a, avail)
		o.ObserveInt64(depth, r, running)
		o.ObserveFloat64(age, oldest, base)
		return nil
	}, depth, age)
	if err != nil {
		otel.Handle(err)
		return nil
	}
	return reg
}

// read returns the cached answer, querying first when it is older than
// every. The query is bounded by queueStatsTimeout; concurrent collections
// wait for one query rather than each sending their own.
func (q *queueStats) read(ctx context.Context) (available, running int64, age float64, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.at.IsZero() || time.Since(q.at) >= q.every {
		q.at = time.Now()
		qctx, cancel := context.WithTimeout(ctx, queueStatsTimeout)
		var a, r int64
		var oldest float64
		err := q.db.QueryRow(qctx, q.sql, q.args...).Scan(&a, &r, &oldest)
		cancel()
		if err != nil {
			q.ok = false
			q.logger.Warn("claim: queue depth query for metrics failed", "err", err)
			// Try again after a second, not a whole interval: one slow
			// answer under load should not blank the gauges for long.
			q.at = time.Now().Add(min(q.every, time.Second) - q.every)
		} else {
			q.ok, q.available, q.runng, q.age = true, a, r, oldest
		}
	}
	return q.available, q.runng, q.age, q.ok
}
