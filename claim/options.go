package claim

import (
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/pgfence/pgfence/internal/validate"
)

const (
	// MaxBatch is the most rows one Claim may take.
	MaxBatch = 10000
	// MinTTL is the shortest job lease TTL: below it one round trip outlives it.
	MinTTL = 10 * time.Millisecond
	// MaxTTL is the longest job lease TTL. A longer one turns a crashed worker
	// into a job stuck for over a day; renew a shorter one instead.
	MaxTTL = 24 * time.Hour
	// MaxRetryDelay bounds what a retry backoff function may return.
	MaxRetryDelay = 30 * 24 * time.Hour
)

// Option configures a Claimer.
type Option func(*config) error

type config struct {
	table    Table
	tableSet bool   // WithTable: the table is the caller's own
	schema   string // WithSchema: pgfence's schema, "" for the search_path
	queue    string
	owner    string
	backoff  func(attempt int) time.Duration
	logger   *slog.Logger

	sweepBatch      int                  // 0: DefaultSweepBatch
	meterProvider   metric.MeterProvider // nil: the global one (metrics.go)
	queueStatsEvery time.Duration        // 0: DefaultQueueStatsInterval
}

func defaultConfig() config {
	host, _ := os.Hostname()
	if host == "" {
		host = "unknown-host"
	}
	return config{
		table:   DefaultTable(),
		queue:   "default",
		owner:   fmt.Sprintf("%s/%d", host, os.Getpid()),
		backoff: DefaultBackoff,
		logger:  slog.New(slog.DiscardHandler),
	}
}

// DefaultBackoff is the default retry delay after the attempt-th failed
// attempt: 1s doubled per attempt, capped at one hour, then drawn uniformly
// from its upper half ("equal jitter") so that failed jobs do not retry in
// step.
func DefaultBackoff(attempt int) time.Duration {
	d := time.Hour
	if attempt < 13 {
		d = min(time.Hour, time.Second<<max(attempt-1, 0))
	}
	return d/2 + time.Duration(mrand.Int64N(int64(d/2)+1))
}

// WithTable makes the claimer work on a table of your own (see Table).
// Default: DefaultTable(), the ready-made pgfence_jobs.
func WithTable(t Table) Option {
	return func(c *config) error {
		if err := t.check(); err != nil {
			return err
		}
		c.table, c.tableSet = t, true
		return nil
	}
}

// WithSchema names the schema of pgfence's objects (migrated with
// migrations.WithSchema): the function pgfence_next_fence that claims draw
// fences from and, unless WithTable names a table of your own, the
// ready-made pgfence_jobs. Every statement names them qualified, so no
// search_path is needed and the claimer works behind a transaction pooler.
// Default: found through the search_path. A name that is not a plain
// identifier is refused with ErrInvalidInput.
func WithSchema(schema string) Option {
	return func(c *config) error {
		if err := checkIdent("schema", schema); err != nil {
			return err
		}
		c.schema = schema
		return nil
	}
}

// WithQueue sets which queue the claimer claims from and rescues, when the
// table has a queue column. Default: "default". Ignored for a table without
// a queue column.
func WithQueue(name string) Option {
	return func(c *config) error {
		if name == "" || len(name) > 128 {
			return invalid("queue name must be 1 to 128 bytes, got %d", len(name))
		}
		c.queue = name
		return nil
	}
}

// WithOwner sets the label stored in the owner column of claimed rows, for
// humans and dashboards. Default: "<hostname>/<pid>". It proves nothing: the
// fence does. The label must be 1 to 256 bytes of valid UTF-8 without a NUL
// byte; New refuses any other with ErrInvalidInput.
func WithOwner(label string) Option {
	return func(c *config) error {
		if err := validate.Owner(label); err != nil {
			return invalid("%v", err)
		}
		c.owner = label
		return nil
	}
}

// WithRetryBackoff sets the delay before a failed job runs again, from the
// number of the attempt that failed (1 for the first). Fail adds it to the
// database's now(). Default: DefaultBackoff. Results are clamped to
// [0, MaxRetryDelay].
func WithRetryBackoff(f func(attempt int) time.Duration) Option {
	return func(c *config) error {
		if f == nil {
			return invalid("nil retry backoff function")
		}
		c.backoff = f
		return nil
	}
}

// WithLogger sets where the claimer and its pools report lost leases,
// rescues and errors they retry. Default: nothing is logged.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return invalid("nil logger")
		}
		c.logger = l
		return nil
	}
}
