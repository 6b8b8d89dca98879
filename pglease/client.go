package pglease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/fencesql"
	"github.com/pgfence/pgfence/internal/pgdb"
	"github.com/pgfence/pgfence/internal/pgerr"
	"github.com/pgfence/pgfence/internal/validate"
)

// Client acquires leases from the lock_leases table through a pool. It is
// safe for concurrent use. Close it to stop renewals and release what it
// still holds.
type Client struct {
	pool *pgxpool.Pool
	// direct and pooled are the same queries in the pool's own mode and in
	// pgdb.Mode, the public ones (fencedb) and pgfence's own (fencesql);
	// mode picks one pair per call (see queries).
	direct, pooled       *fencedb.Queries
	directOwn, pooledOwn *fencesql.Queries
	mode                 *pgdb.Auto
	cfg                  config
	wakeID               string // names this client's wake-up channel (wake.go)

	// renewHook, when set by tests, replaces the renew statement (a seam to
	// stall or fail renewals).
	renewHook func(ctx context.Context, l *Lease) (time.Time, error)

	met *metrics // OpenTelemetry instruments (metrics.go)

	wake *waker // nil unless WithWakeOnRelease

	// closing ends when Close starts: goroutines that run until their
	// caller's context ends (Observe) watch it too, so Close never waits
	// on a caller.
	closing     context.Context
	stopClosing context.CancelFunc

	mu     sync.Mutex
	closed bool
	leases map[*Lease]struct{}
	wg     sync.WaitGroup // renewal, ambiguity-recheck and batch goroutines

	group groupAcquirer // group acquire (group.go)
}

// New returns a client that takes leases through pool. The pool must reach a
// database on which pgfence's migrations ran (see package migrations or
// `pgfence migrate up`).
func New(pool *pgxpool.Pool, opts ...Option) (*Client, error) {
	if pool == nil {
		return nil, invalid("nil pool")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	// pgdb names WithSchema's schema in every statement and tells a
	// statement that never got a connection from one whose answer was lost
	// (mayHaveExecuted).
	direct, pooled := pgdb.WrapOwnMode(pool, cfg.schema), pgdb.Wrap(pool, cfg.schema)
	c := &Client{pool: pool, direct: fencedb.New(direct), pooled: fencedb.New(pooled),
		directOwn: fencesql.New(direct), pooledOwn: fencesql.New(pooled),
		mode: pgdb.NewAuto(pool), cfg: cfg, leases: map[*Lease]struct{}{}}
	c.wakeID = newToken()[:wakeIDLen]
	c.met = newMetrics(cfg.meterProvider, pool)
	c.closing, c.stopClosing = context.WithCancel(context.Background())
	if cfg.wakeOnRelease {
		c.wake = newWaker(c)
	}
	return c, nil
}

// closeReleases is how many releases Close runs at once.
const closeReleases = 8

// Close stops every renewal and the wake-on-release listener, releases every
// lease this client still holds (best effort, each within a few seconds) and
// waits for the client's goroutines to end. Those include the second give-back
// of an acquisition whose answer was lost, which runs once the lost
// statement's lock waits are surely over (a second per key it carried, plus
// half a second, after the loss): so Close may take that long after a broken
// connection, rather than leave such a grant held until its TTL (an
// acquisition still in flight when Close returns waits for its own second
// give-back before it returns its error). Later calls fail with ErrClosed.
// Close the client before its pool: the listener's connection is no longer
// the pool's, so only Close ends it.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	held := make([]*Lease, 0, len(c.leases))
	for l := range c.leases {
		held = append(held, l)
	}
	c.mu.Unlock()
	c.stopClosing()
	if c.wake != nil {
		c.wake.stop()
	}
	// Released a few at a time, each within 5 s: against a server that went
	// silent, Close takes seconds, not 5 s per lease held.
	errs := make([]error, len(held))
	sem := make(chan struct{}, closeReleases)
	var wg sync.WaitGroup
	for i, l := range held {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := l.Release(ctx); err != nil && !errors.Is(err, pgfence.ErrLeaseLost) {
				errs[i] = err
			}
		})
	}
	wg.Wait()
	c.wg.Wait()
	c.met.close()
	return errors.Join(errs...)
}

// track counts one more goroutine for Close to wait for, unless the client
// is closed. Adding under the mutex that Close takes before it waits keeps
// Add from racing Wait.
func (c *Client) track() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Add(1)
	return true
}

// Owner is the owner label this client stores with its leases.
func (c *Client) Owner() string { return c.cfg.owner }

func validateKey(key string) error {
	if err := validate.Key(key); err != nil {
		return invalid("%v", err)
	}
	return nil
}

func (c *Client) checkArgs(key string, ttl time.Duration) error {
	if err := validateKey(key); err != nil {
		return err
	}
	if ttl < validate.MinTTL || ttl > validate.MaxTTL {
		return invalid("TTL %v is outside [%v, %v]", ttl, validate.MinTTL, validate.MaxTTL)
	}
	if c.cfg.safetyMargin >= ttl {
		return invalid("safety margin %v must be shorter than the TTL %v", c.cfg.safetyMargin, ttl)
	}
	if s := c.schedule(ttl); c.cfg.autoRenew && s.Interval() >= ttl-s.SafetyMargin() {
		// The local deadline (TTL - margin after the grant) would pass before
		// the first renewal is due: every lease would be lost.
		return invalid("renew interval %v must be shorter than the TTL %v minus the safety margin %v (defaults: a third and a tenth of the TTL)",
			s.Interval(), ttl, s.SafetyMargin())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	return nil
}

// TryAcquire takes the lease on key for ttl if no other owner holds the key
// in a way that excludes it, and returns pgfence.ErrNotAcquired at once
// otherwise. Without a kind it takes the exclusive (plain) lease; with one
// (Shared, Permits), that kind. Every acquisition's ttl must lie in
// [10ms, 24h], or it returns pgfence.ErrInvalidInput before sending anything.
// Expiry is judged by the database's now(), never by this machine's clock.
// It returns by ctx's deadline plus a few milliseconds: when the server's
// answer was lost, what is left to settle goes on in the background (each
// statement within 5s). A grant from an older WAL timeline than this client
// has seen is refused with pgfence.ErrStaleTimeline (see WithTimelineMark).
func (c *Client) TryAcquire(ctx context.Context, key string, ttl time.Duration, kind ...Kind) (*Lease, error) {
	k, err := c.checkKind(key, ttl, kind)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	var l *Lease
	if k == (Kind{}) {
		l, err = c.acquire(ctx, key, ttl)
	} else {
		l, err = c.trySlot(ctx, key, ttl, k)
	}
	c.met.acquired(opTry, start, err)
	return l, err
}

// Acquire takes the lease on key, of the kind given (Exclusive without one),
// waiting while other owners hold it in a way that excludes it: retries back
// off exponentially with full jitter (WithBackoff) until the lease is
// granted, ctx ends, or the maximum wait (WithMaxWait) passes; with
// WithFairWaiting, in the key's queue. With WithWakeOnRelease, a release of
// key also ends the current backoff sleep at once; the backoff stays as the
// fallback for lost notifications and for leases that end by expiry, which
// notify nobody. Then it returns an error that satisfies
// errors.Is(err, pgfence.ErrNotAcquired) and says how long it waited.
// Transient errors (a dropped connection, a server restarting) are retried
// the same way; definite ones (a missing schema, bad input,
// ErrPermitsMismatch) end it at once.
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration, kind ...Kind) (*Lease, error) {
	k, err := c.checkKind(key, ttl, kind)
	switch {
	case err != nil:
		return nil, err
	case k != (Kind{}):
		return c.acquireSlot(ctx, key, ttl, k)
	case c.cfg.fair:
		return c.acquireFair(ctx, key, ttl)
	}
	return c.acquireExclusive(ctx, key, ttl)
}

// checkKind checks an acquisition's arguments and returns its kind.
func (c *Client) checkKind(key string, ttl time.Duration, kind []Kind) (Kind, error) {
	k, err := kindOf(kind)
	if err != nil {
		return Kind{}, err
	}
	return k, c.checkArgs(key, ttl)
}

// waitFor runs attempt until it grants a lease, as Acquire describes: the
// backoff, the wake on a release of key (a notification whose payload is
// wake), the maximum wait, and which errors end the wait. Every kind of
// lease waits through it.
func (c *Client) waitFor(ctx context.Context, key, wake string, attempt func(context.Context) (*Lease, error)) (*Lease, error) {
	return c.waitWoken(ctx, key, func() wakeAddr { return wakeAddr{wakeChannel, wake} }, attempt)
}

// waitWoken is waitFor for a wake-up address that may change between
// attempts (a fair waiter's owner token, replaced when an attempt's outcome
// was settled by tombstoning it): before each attempt, the subscription is
// to the address wake returns then.
func (c *Client) waitWoken(ctx context.Context, key string, wake func() wakeAddr, attempt func(context.Context) (*Lease, error)) (_ *Lease, err error) {
	start := time.Now()
	defer func() { c.met.acquired(opWait, start, err) }()
	bound := c.cfg.backoffMin
	var woken <-chan struct{} // nil, never ready, without WithWakeOnRelease
	var subscribed wakeAddr
	unsubscribe := func() {}
	defer func() { unsubscribe() }()
	// Before an attempt, so that no release between a failed attempt and
	// the subscription goes unheard.
	subscribe := func() {
		if c.wake == nil || wake() == subscribed {
			return
		}
		unsubscribe()
		subscribed = wake()
		woken, unsubscribe = c.wake.subscribe(subscribed)
	}
	subscribe()
	var lastErr error
	for n := 1; ; n++ {
		l, err := attempt(ctx)
		if err == nil {
			return l, nil
		}
		if errors.Is(err, pgfence.ErrNotAcquired) {
			lastErr = nil
		} else if isTransient(err) && ctx.Err() == nil {
			lastErr = err
			c.cfg.logger.Warn("pglease: acquire failed, retrying", "key", key, "err", err)
		} else if ctx.Err() == nil {
			return nil, err
		}
		waitErr := func(cause error) error {
			return &waitError{key: key, waited: time.Since(start), attempts: n, cause: cause, lastErr: lastErr}
		}
		if ctx.Err() != nil {
			return nil, waitErr(context.Cause(ctx))
		}
		sleep := time.Duration(mrand.Int64N(int64(bound))) + time.Millisecond
		bound = min(2*bound, c.cfg.backoffMax)
		sleep = c.queuedSleep(err, sleep)
		if c.cfg.maxWait > 0 {
			left := c.cfg.maxWait - time.Since(start)
			if left <= 0 {
				return nil, waitErr(nil)
			}
			sleep = min(sleep, left)
		}
		if c.wake != nil {
			subscribe()
			c.wake.start() // lazily, on the first wait
		}
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, waitErr(context.Cause(ctx))
		case <-t.C:
		case <-woken:
			t.Stop()
		}
	}
}

// Do acquires key (waiting as Acquire does, in the kind given), runs fn
// with a context that ends when fn's caller's ctx ends or the lease is lost
// (context.Cause then says which), and releases the lease when fn returns.
// fn should pass l.Fence() to every protected write, so that the resource can
// refuse it if the lease was lost on the way. The error joins fn's error and
// the release's.
func (c *Client) Do(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context, l *Lease) error, kind ...Kind) error {
	if fn == nil {
		return invalid("Do needs a function to run")
	}
	l, err := c.Acquire(ctx, key, ttl, kind...)
	if err != nil {
		return err
	}
	return c.run(ctx, l, fn)
}

// TryDo is Do that does not wait: when other owners hold key it returns
// pgfence.ErrNotAcquired at once without running fn. It suits scheduled
// work, where a held key means another instance is doing this tick's work.
func (c *Client) TryDo(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context, l *Lease) error, kind ...Kind) error {
	if fn == nil {
		return invalid("TryDo needs a function to run")
	}
	l, err := c.TryAcquire(ctx, key, ttl, kind...)
	if err != nil {
		return err
	}
	return c.run(ctx, l, fn)
}

// run runs fn under l and releases l when fn returns, or panics: a panic
// goes on up once the lease is given back, rather than leaving it held and
// renewed until Close.
func (c *Client) run(ctx context.Context, l *Lease, fn func(context.Context, *Lease) error) (err error) {
	fnCtx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(l.ctx, func() { cancel(context.Cause(l.ctx)) })
	defer func() {
		stop()
		cancel(nil)
		relCtx, relCancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer relCancel()
		err = errors.Join(err, l.Release(relCtx))
	}()
	return fn(fnCtx, l)
}

func newToken() string {
	var b [16]byte // 128 bits
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// tryAcquire sends one acquisition. When its outcome is ambiguous (the
// statement was sent but no answer came), it asks again by owner token:
// a caller still waiting adopts a lease that was granted; a caller that gave
// up has it released, so nothing stays held until the TTL.
func (c *Client) tryAcquire(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	token := newToken()
	sent := time.Now() // the local deadline is measured from before the send
	row, err := c.queries(ctx).Acquire(ctx, fencedb.AcquireParams{
		LockKey: key, Owner: c.cfg.owner, OwnerToken: token, TtlMicros: ttl.Microseconds(),
	})
	switch {
	case err == nil:
		return c.startLease(key, token, row.Fence, row.ExpiresAt, ttl, sent)
	case isNoRows(err):
		return nil, notAcquired(key)
	case pgerr.IsLockNotAvailable(err):
		// Another acquisition of the same key held the row past our
		// lock_timeout: someone else is taking it.
		return nil, fmt.Errorf("%w: %q (another acquisition was in progress)", pgfence.ErrNotAcquired, key)
	case mayHaveExecuted(err):
		return c.resolveAmbiguous(ctx, key, token, ttl, sent, err, 1)
	default:
		return nil, c.explain(key, err)
	}
}

func notAcquired(key string) error { return fmt.Errorf("%w: %q", pgfence.ErrNotAcquired, key) }

func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

// resolveAmbiguous settles an acquisition sent in a statement for keys
// attempts (1, or a batch's size) whose answer was lost. While the caller's
// ctx lasts, it asks by owner token and adopts a grant that landed, or gives
// it back; whatever is left to do when ctx ends (or when the server cannot
// tell) goes on in the background (giveBackLater), so the caller returns
// with its context.
func (c *Client) resolveAmbiguous(ctx context.Context, key, token string, ttl time.Duration, sent time.Time, cause error, keys int) (*Lease, error) {
	lost := time.Now()
	if ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, c.cfg.resolveWait)
		defer cancel()
		row, err := c.own(rctx).FindByOwnerToken(rctx, fencesql.FindByOwnerTokenParams{LockKey: key, OwnerToken: token})
		if err == nil {
			c.met.resolved(resAdopted, false, lost)
			c.cfg.logger.Info("pglease: ambiguous acquire was granted; keeping it", "key", key, "fence", row.Fence)
			return c.startLease(key, token, row.Fence, row.ExpiresAt, ttl, sent)
		}
		if isNoRows(err) {
			// Not adopted: tombstone the token, so that the request can
			// never be granted however late it reaches the server, and give
			// back a grant that already landed.
			if _, err = c.abandon(rctx, key, token); err == nil {
				c.met.resolved(resGivenBack, false, lost)
				// An acquisition that reached the server before the
				// tombstone committed may still be executing (waiting on a
				// row lock, bounded by the statement's lock_timeout):
				// abandon once more after that bound.
				c.recheckLater(key, token, keys)
				return nil, fmt.Errorf("pglease: acquiring %q: no answer from the server, and the lease was not kept: %w", key, cause)
			}
		}
		if ctx.Err() == nil {
			c.giveBackLater(key, token, keys, lost)
			return nil, &ambiguousError{key: key, ttl: ttl, err: cause, resolveErr: err}
		}
	}
	c.giveBackLater(key, token, keys, lost)
	return nil, fmt.Errorf("pglease: acquiring %q: %w; the server's answer was lost (%w), and the acquisition is given back in the background",
		key, context.Cause(ctx), cause)
}

// giveBackLater abandons token in the background, within resolveBound, then
// once more after the lost statement must have ended. It is what an
// acquisition whose answer was lost leaves behind when its caller cannot
// wait: the tombstone makes sure the request is never granted later, and a
// grant that landed is released instead of held until its TTL.
func (c *Client) giveBackLater(key, token string, keys int, lost time.Time) {
	c.inBackground(func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.resolveWait)
		_, err := c.abandon(ctx, key, token)
		cancel()
		if err != nil {
			c.met.resolved(resFailed, true, lost)
			c.cfg.logger.Warn("pglease: could not give back an acquisition whose answer was lost; if it was granted, it expires at its TTL",
				"key", key, "err", err)
		} else {
			c.met.resolved(resGivenBack, true, lost)
		}
		c.recheck(key, token, keys)
	})
}

// abandonedTokenRetention is how long the tombstone of an abandoned
// acquisition is kept before SweepExpired deletes it. While it exists, the
// acquisition it names can never be granted, however late its request
// reaches the server. It must outlast any time a request can spend on the
// way: TCP retransmits unacknowledged data for about 15 minutes at most
// (Linux's tcp_retries2 default), PgBouncer queues a query for at most
// query_wait_timeout (120 s by default; do not set it to 0, which means
// forever). An hour leaves a wide margin, and tombstones are few: one per
// acquisition whose answer was lost.
const abandonedTokenRetention = time.Hour

// acquireLockTimeout is the lock_timeout the acquire statement sets for
// itself (see queries/leases.sql); the ambiguity re-check waits past it.
const acquireLockTimeout = time.Second

// abandon tombstones token and releases what it holds on key, if anything;
// it reports whether a grant was released.
func (c *Client) abandon(ctx context.Context, key, token string) (bool, error) {
	_, err := c.own(ctx).Abandon(ctx, fencesql.AbandonParams{LockKey: key, OwnerToken: token, Notify: c.cfg.wakeOnRelease})
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	c.cfg.logger.Info("pglease: released a grant its caller did not keep (its answer was lost, or it came from an older timeline)", "key", key)
	return true, nil
}

// recheckLater abandons token once more, in the background, after the
// statement that carried it (for keys attempts) must have ended.
func (c *Client) recheckLater(key, token string, keys int) {
	c.inBackground(func() { c.recheck(key, token, keys) })
}

// recheck waits until the statement that carried token (for keys attempts)
// must have ended, lock_timeout bounding each of its row lock waits, one per
// key, and abandons token once more.
func (c *Client) recheck(key, token string, keys int) {
	time.Sleep(time.Duration(keys)*acquireLockTimeout + 500*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.resolveWait)
	defer cancel()
	c.abandon(ctx, key, token)
}

// inBackground runs fn on a goroutine that Close waits for. Once the
// client is closed, Close waits for no goroutine of ours: the caller runs fn
// itself then, rather than leave a late grant held until its TTL.
func (c *Client) inBackground(fn func()) {
	if !c.track() {
		fn()
		return
	}
	go func() {
		defer c.wg.Done()
		fn()
	}()
}

// explain adds what to do to errors a user can fix.
func (c *Client) explain(key string, err error) error {
	var denied *pgdb.PrivilegeError
	if pgerr.IsUndefined(err) && !errors.As(err, &denied) {
		return fmt.Errorf("pglease: acquiring %q: pgfence's schema is missing from this database (run `pgfence migrate up` or migrations.Up): %w", key, err)
	}
	return fmt.Errorf("pglease: acquiring %q: %w", key, err)
}

// mayHaveExecuted reports whether err leaves the statement's effect unknown:
// something was sent, and no answer from the server came back.
func mayHaveExecuted(err error) bool {
	if pgerr.FromServer(err) {
		return false // the server answered: the statement failed as a whole
	}
	if pgdb.NotSent(err) {
		return false // no connection was taken: nothing was sent
	}
	return !pgconn.SafeToRetry(err)
}

// isTransient reports errors worth retrying: network trouble and a server
// that is starting, stopping or out of connections.
func isTransient(err error) bool {
	if pgerr.FromServer(err) {
		return pgerr.IsTransient(err)
	}
	if errors.Is(err, ErrAmbiguous) {
		return true
	}
	return !errors.Is(err, pgfence.ErrInvalidInput) && !errors.Is(err, ErrClosed)
}

// queries are the client's statements in the cheapest mode that is safe on
// its pool: named prepared statements on a direct connection, unnamed ones
// behind a transaction pooler (pgdb.Auto checks once per client).
func (c *Client) queries(ctx context.Context) *fencedb.Queries {
	if c.mode.Direct(ctx) {
		return c.direct
	}
	return c.pooled
}

// own is queries for pgfence's own statements (package fencesql).
func (c *Client) own(ctx context.Context) *fencesql.Queries {
	if c.mode.Direct(ctx) {
		return c.directOwn
	}
	return c.pooledOwn
}
