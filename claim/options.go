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
	// maxBatch is the most rows one Claim may take.
	maxBatch = 10000
	// minTTL is the shortest job lease TTL: below it one round trip outlives it.
	minTTL = 10 * time.Millisecond
	// maxTTL is the longest job lease TTL. A longer one turns a crashed worker
	// into a job stuck for over a day; renew a shorter one instead.
	maxTTL = 24 * time.Hour
	// maxRetryDelay bounds what a retry backoff function may return.
	maxRetryDelay = 30 * 24 * time.Hour
)

// Option configures New (a Claimer) or NewRunner and NewTxRunner (a
// Runner); each With function says which. One given to the other is refused
// with pgfence.ErrInvalidInput, so a setting is never silently ignored.
type Option func(settings) error

// settings is what an Option configures: exactly one of the two is set.
type settings struct {
	claimer *config
	runner  *runnerConfig
}

// claimerOption makes an Option that configures a Claimer.
func claimerOption(name string, fn func(*config) error) Option {
	return func(s settings) error {
		if s.claimer == nil {
			return invalid("%s configures a Claimer: give it to New, not to NewRunner or NewTxRunner", name)
		}
		return fn(s.claimer)
	}
}

// runnerOption makes an Option that configures a Runner.
func runnerOption(name string, fn func(*runnerConfig) error) Option {
	return func(s settings) error {
		if s.runner == nil {
			return invalid("%s configures a Runner: give it to NewRunner or NewTxRunner, not to New", name)
		}
		return fn(s.runner)
	}
}

// apply applies opts in order; nil options are skipped.
func apply(opts []Option, s settings) error {
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(s); err != nil {
			return err
		}
	}
	return nil
}

type config struct {
	table    Table
	tableSet bool   // WithTable: the table is the caller's own
	schema   string // WithSchema: pgfence's schema, "" for the search_path
	queue    string
	owner    string
	backoff  func(attempt int) time.Duration
	logger   *slog.Logger

	sweepBatch      int                  // 0: defaultSweepBatch
	meterProvider   metric.MeterProvider // nil: the global one (metrics.go)
	queueStatsEvery time.Duration        // 0: defaultQueueStatsInterval
}

func defaultConfig() config {
	host, _ := os.Hostname()
	if host == "" {
		host = "unknown-host"
	}
	return config{
		table:   defaultTable(),
		queue:   "default",
		owner:   fmt.Sprintf("%s/%d", host, os.Getpid()),
		backoff: defaultBackoff,
		logger:  slog.New(slog.DiscardHandler),
	}
}

// defaultBackoff is the default retry delay after the attempt-th failed
// attempt: 1s doubled per attempt, capped at one hour, then drawn uniformly
// from its upper half ("equal jitter") so that failed jobs do not retry in
// step.
func defaultBackoff(attempt int) time.Duration {
	d := time.Hour
	if attempt < 13 {
		d = min(time.Hour, time.Second<<max(attempt-1, 0))
	}
	return d/2 + time.Duration(mrand.Int64N(int64(d/2)+1))
}

// WithTable makes the claimer work on a table of your own (see Table).
// Default: the ready-made pgfence_jobs.
func WithTable(t Table) Option {
	return claimerOption("WithTable", func(c *config) error {
		if err := t.check(); err != nil {
			return err
		}
		c.table, c.tableSet = t, true
		return nil
	})
}

// WithSchema names the schema of pgfence's objects (migrated with
// migrations.WithSchema): the function pgfence_next_fence that claims draw
// fences from and, unless WithTable names a table of your own, the
// ready-made pgfence_jobs. Every statement names them qualified, so no
// search_path is needed and the claimer works behind a transaction pooler.
// Default: found through the search_path. A name that is not a plain
// identifier is refused with pgfence.ErrInvalidInput.
func WithSchema(schema string) Option {
	return claimerOption("WithSchema", func(c *config) error {
		if err := checkIdent("schema", schema); err != nil {
			return err
		}
		c.schema = schema
		return nil
	})
}

// WithQueue sets which queue the claimer claims from and rescues, when the
// table has a queue column. Default: "default". Ignored for a table without
// a queue column.
func WithQueue(name string) Option {
	return claimerOption("WithQueue", func(c *config) error {
		if name == "" || len(name) > 128 {
			return invalid("queue name must be 1 to 128 bytes, got %d", len(name))
		}
		c.queue = name
		return nil
	})
}

// WithOwner sets the label stored in the owner column of claimed rows, for
// humans and dashboards. Default: "<hostname>/<pid>". It proves nothing: the
// fence does. The label must be 1 to 256 bytes of valid UTF-8 without a NUL
// byte; New refuses any other with pgfence.ErrInvalidInput.
func WithOwner(label string) Option {
	return claimerOption("WithOwner", func(c *config) error {
		if err := validate.Owner(label); err != nil {
			return invalid("%v", err)
		}
		c.owner = label
		return nil
	})
}

// WithRetryBackoff sets the delay before a failed job runs again, from the
// number of the attempt that failed (1 for the first). Fail adds it to the
// database's now(). Default: 1s doubled per attempt, capped at an hour,
// drawn from its upper half so that failed jobs do not retry in step.
// Results are clamped to [0, 30 days].
func WithRetryBackoff(f func(attempt int) time.Duration) Option {
	return claimerOption("WithRetryBackoff", func(c *config) error {
		if f == nil {
			return invalid("nil retry backoff function")
		}
		c.backoff = f
		return nil
	})
}

// WithLogger sets where the claimer and its pools report lost leases,
// rescues and errors they retry. Default: nothing is logged.
func WithLogger(l *slog.Logger) Option {
	return claimerOption("WithLogger", func(c *config) error {
		if l == nil {
			return invalid("nil logger")
		}
		c.logger = l
		return nil
	})
}
