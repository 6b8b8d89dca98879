package pglease

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/validate"
)

// resolveBound bounds each statement that settles an acquisition whose
// answer was lost (the read-back by owner token, the give-back). The read-
// back runs within the caller's context too; a give-back left when that
// context ends runs in the background (metric
// pgfence.lease.ambiguous.resolutions, where=background), so TryAcquire,
// Acquire and Release return within their context's deadline plus a few
// milliseconds, not resolveBound.
const resolveBound = 5 * time.Second

// Option configures a Client.
type Option func(*config) error

type config struct {
	owner         string
	renewInterval time.Duration // 0: TTL/3
	autoRenew     bool
	safetyMargin  time.Duration // 0: TTL/10
	backoffMin    time.Duration
	backoffMax    time.Duration
	maxWait       time.Duration // 0: no maximum
	resolveWait   time.Duration
	wakeOnRelease bool
	listenPool    *pgxpool.Pool // WithWakeOnRelease's; nil: the client's pool
	fair          bool          // WithFairWaiting
	observePoll   time.Duration // Observe's polling interval
	logger        *slog.Logger

	durableRelease bool
	sweepBatch     int
	meterProvider  metric.MeterProvider  // nil: the global one
	schema         string                // WithSchema; "": the search_path
	timelines      *pgfence.TimelineMark // WithTimelineMark; else the client's own
}

func defaultConfig() config {
	host, _ := os.Hostname()
	if host == "" {
		host = "unknown-host"
	}
	return config{
		owner:       fmt.Sprintf("%s/%d", host, os.Getpid()),
		autoRenew:   true,
		backoffMin:  20 * time.Millisecond,
		backoffMax:  1 * time.Second,
		resolveWait: resolveBound,
		observePoll: defaultObserveInterval,
		sweepBatch:  defaultSweepBatch,
		logger:      slog.New(slog.DiscardHandler),
		timelines:   new(pgfence.TimelineMark),
	}
}

// WithOwner sets the owner label stored with each lease, for humans and
// dashboards (pgfence list). Default: "<hostname>/<pid>". It is not what
// proves ownership: each acquisition carries its own random token and fence.
// The label must be 1 to 256 bytes of valid UTF-8 without a NUL byte; New
// refuses any other with pgfence.ErrInvalidInput.
func WithOwner(label string) Option {
	return func(c *config) error {
		if err := validate.Owner(label); err != nil {
			return invalid("%v", err)
		}
		c.owner = label
		return nil
	}
}

// WithRenewInterval sets how often auto-renewal extends a lease. Default: a
// third of the lease's TTL, which tolerates one failed renewal. Acquiring a
// lease whose TTL is not longer than the interval fails with pgfence.ErrInvalidInput:
// such a lease can be lost to one slow round trip.
func WithRenewInterval(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return invalid("renew interval must be positive, got %v", d)
		}
		c.renewInterval = d
		return nil
	}
}

// WithoutAutoRenew turns auto-renewal off (default: on). The lease then ends
// at its TTL unless the caller calls Renew; its context ends at the local
// deadline.
func WithoutAutoRenew() Option {
	return func(c *config) error { c.autoRenew = false; return nil }
}

// WithSafetyMargin sets how much earlier than the TTL the client considers a
// lease lost, measured on its monotonic clock from just before the acquire or
// renew was sent, for clock drift and the reply's trip. Default: a tenth of
// the TTL. Must be shorter than the TTL.
func WithSafetyMargin(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return invalid("safety margin must be positive, got %v", d)
		}
		c.safetyMargin = d
		return nil
	}
}

// WithBackoff bounds Acquire's retry sleeps: exponential from min to max,
// each sleep drawn uniformly from [0, bound) ("full jitter") so that waiters
// spread out instead of polling in step. Default: 20ms to 1s.
func WithBackoff(min, max time.Duration) Option {
	return func(c *config) error {
		if min <= 0 || max < min {
			return invalid("backoff bounds need 0 < min <= max, got %v and %v", min, max)
		}
		c.backoffMin, c.backoffMax = min, max
		return nil
	}
}

// WithMaxWait caps how long Acquire (and Do) waits for a held key. Default:
// no cap beyond the context's deadline. Set one, or give Acquire a context
// with a deadline: a caller that waits forever has turned a coordination
// fault into an outage.
func WithMaxWait(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return invalid("maximum wait must be positive, got %v", d)
		}
		c.maxWait = d
		return nil
	}
}

// WithWakeOnRelease makes Acquire (and Do) retry as soon as the holder
// releases the key, instead of at the end of its current backoff sleep.
// Default: off; waiters only poll.
//
// With this option the client's releases send NOTIFY pgfence_lease_released
// with the key as payload from within the release statement itself, so the
// notification is delivered only at its commit, once the lease is free; and
// the client keeps one connection, taken from the pool (or the listen pool's)
// for good on the first Acquire that has to wait (or the first Observe) and
// held until Close, that LISTENs on that channel and wakes this client's
// waiters for the released key (all of them: one wins, the others sleep
// again). Give the option to every client that
// takes the key: a client without it releases silently. It is off by default
// because NOTIFY is not free: PostgreSQL commits notifying transactions one
// at a time, which halved acquire+release throughput at 8 or more concurrent
// clients on a server with fsync on. Polling stays as the
// fallback, so the backoff maximum (WithBackoff) still bounds the wait when a
// notification is lost: while the listener is down (it reconnects with
// backoff), or when a lease ends by expiry, which notifies nobody.
//
// With WithFairWaiting, the wake-ups come from the database instead, for
// every kind of key, whoever releases: only the first waiters that could be
// granted are woken, each by its owner token (see WithFairWaiting).
//
// LISTEN needs a server session of its own, which a transaction or
// statement pooler (PgBouncer's usual pool modes) does not give: behind one,
// give the listener a pool of its own that bypasses it, listen: one that
// reaches the same database directly (or through a session pooler), for its
// one LISTEN connection only. Every other statement, the releases' NOTIFY
// included, still goes through the client's pool. The listener takes one
// connection from it for good on the first wait (or Observe) and holds it
// until Close; close the pool after the client. MaxConns 1 suffices.
//
// Without a listen pool, the client's own pool serves. The first time the
// listener would start, it checks what lies in front of PostgreSQL (the
// listen pool's as well): behind a transaction or statement pooler it sends
// no LISTEN (a LISTEN there stays behind on a pooled server session, and
// its notifications go to other clients or are dropped), the client logs a
// warning once and counts pgfence.listen.disabled, and waiters poll: fair
// waiters (WithFairWaiting) near the backoff's minimum, as without
// WithWakeOnRelease, and the others with their backoff. More than one listen
// pool, or a nil one, is refused with pgfence.ErrInvalidInput.
func WithWakeOnRelease(listen ...*pgxpool.Pool) Option {
	return func(c *config) error {
		switch {
		case len(listen) > 1:
			return invalid("WithWakeOnRelease takes at most one listen pool, got %d", len(listen))
		case len(listen) == 1 && listen[0] == nil:
			return invalid("nil listen pool: give WithWakeOnRelease a pool that connects directly to PostgreSQL, or none")
		case len(listen) == 1:
			c.listenPool = listen[0]
		}
		c.wakeOnRelease = true
		return nil
	}
}

// WithLogger sets where the client reports renewals that failed, leases lost
// and ambiguous acquisitions resolved. Default: nothing is logged.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return invalid("nil logger")
		}
		c.logger = l
		return nil
	}
}

// WithDurableRelease makes releases commit durably (synchronous_commit on for
// the release's transaction). Default: off; a release commits asynchronously,
// which saves one WAL flush per acquire + release. That is safe: a release
// lost in a server crash (it is lost only if the server crashes within a few
// hundred milliseconds of it, before the WAL writer or any later durable
// commit flushes it) leaves the lease held until its TTL, never two holders.
// Set this option when a crash-restart of the database must not keep a
// released key blocked for up to a TTL, for example with long TTLs.
// Acquisition and renewal always commit durably.
func WithDurableRelease() Option {
	return func(c *config) error { c.durableRelease = true; return nil }
}

// WithSchema puts the client on the pgfence objects of schema (migrated with
// migrations.WithSchema, or `pgfence migrate up --schema`): its own
// lock_leases table and fence sequence, independent of every other schema's.
// Every statement names them qualified, so no search_path is needed and the
// client works behind a transaction pooler (PgBouncer). Default: found
// through the connections' search_path. A name that is not a plain
// identifier is refused with pgfence.ErrInvalidInput.
func WithSchema(schema string) Option {
	return func(c *config) error {
		if err := validate.Identifier("schema", schema); err != nil {
			return invalid("%v", err)
		}
		c.schema = schema
		return nil
	}
}
