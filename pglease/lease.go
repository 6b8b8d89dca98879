package pglease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/fencesql"
	"github.com/pgfence/pgfence/internal/keepalive"
)

// Lease is one granted lease. Its fence is the fencing token: pass it to
// every protected write, so the resource can refuse the write once a newer
// holder has written (see package pgguard).
//
// A lease keeps two views of its validity. The database's, which decides
// grants: the lease is valid until expires_at by now(). And the client's own,
// more pessimistic one, on Go's monotonic clock: the time just before the
// last successful acquire or renew was sent, plus the TTL, minus the safety
// margin. When the local deadline passes without a successful renewal, or a
// renewal finds the lease gone, Context() ends with pgfence.ErrLeaseLost as its cause.
type Lease struct {
	c     *Client
	key   string
	token string
	fence int64
	ttl   time.Duration
	start time.Time // before the acquisition was sent, for pgfence.lease.held.duration
	row   leaseRow  // which row holds it, and how it is released (rows.go)

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu         sync.Mutex
	deadline   time.Time   // local, monotonic
	expiresAt  time.Time   // as the server last reported it
	timer      *time.Timer // fires at deadline
	renewTimer *time.Timer // fires when the next auto-renewal is due; nil without auto-renewal
	stopping   bool        // Release began: no more auto-renewals
	inSet      bool        // a key set's lease: the set renews it with the others (keyset.go)
	ended      bool        // lost or released
	released   bool

	// renewing is full for the length of one auto-renewal attempt, so that
	// Release can wait for an attempt in flight (a channel, so that the wait
	// ends with Release's context). Renewals run on timer callbacks, not on a
	// goroutine parked per lease: a held lease costs two timers and no
	// goroutine between renewals.
	renewing chan struct{}
}

func (c *Client) startLease(key, token string, fence int64, expiresAt time.Time, ttl time.Duration, sent time.Time) (*Lease, error) {
	return c.startRow(key, token, fence, expiresAt, ttl, sent, leaseRow{})
}

// startRow is startLease for a lease held in the row row names.
func (c *Client) startRow(key, token string, fence int64, expiresAt time.Time, ttl time.Duration, sent time.Time, row leaseRow) (*Lease, error) {
	if err := c.checkTimeline(key, token, fence, row); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	l := &Lease{
		c: c, key: key, token: token, fence: fence, ttl: ttl, start: sent, row: row,
		ctx: ctx, cancel: cancel, renewing: make(chan struct{}, 1),
		deadline:  c.schedule(ttl).Deadline(sent),
		expiresAt: expiresAt,
	}
	// The timers exist before the lease is published in c.leases: Close
	// (or a Release racing this) may take it from there at once.
	l.mu.Lock()
	l.timer = time.AfterFunc(time.Until(l.deadline), l.deadlinePassed)
	if c.cfg.autoRenew {
		l.renewTimer = time.AfterFunc(c.schedule(ttl).Interval(), l.renewDue)
	}
	l.mu.Unlock()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		// Closed while acquiring: give the grant back.
		l.mu.Lock()
		l.ended = true
		l.stopTimers()
		l.mu.Unlock()
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer rcancel()
		l.releaseRow(rctx)
		cancel(ErrClosed)
		return nil, ErrClosed
	}
	c.leases[l] = struct{}{}
	c.mu.Unlock()
	c.met.leaseStarted()
	return l, nil
}

// schedule is how a lease of TTL ttl is kept alive: package keepalive's
// rule, with the client's WithSafetyMargin and WithRenewInterval. Each
// lease keeps its own two timers rather than joining a keepalive.Keeper;
// see that package's doc for why.
func (c *Client) schedule(ttl time.Duration) keepalive.Schedule {
	return keepalive.Schedule{TTL: ttl, Margin: c.cfg.safetyMargin, Every: c.cfg.renewInterval}
}

// lostError is the cause of l's context when it is lost with cause.
func (l *Lease) lostError(cause keepalive.Cause) error {
	return &pgfence.LeaseLostError{Key: l.key, Fence: l.fence, Cause: cause.String()}
}

// Key is the lock key.
func (l *Lease) Key() string { return l.key }

// Fence is the fencing token: unique to this grant and larger than every
// fence granted before it on this key, also across deletion of the row, a
// crash-restart and the promotion of a standby.
func (l *Lease) Fence() int64 { return l.fence }

// Context ends when the lease is lost or released: Context().Done() is
// closed then, and context.Cause(l.Context()) is nil while the lease is held
// and afterwards says why it ended (pgfence.ErrLeaseLost, as a *pgfence.LeaseLostError, or
// ErrReleased, wrapped with details). The context carries no deadline: the
// local one moves with every renewal (see Deadline).
func (l *Lease) Context() context.Context { return l.ctx }

// Deadline is the local deadline on the monotonic clock: the lease counts as
// lost at this instant unless a renewal succeeds first.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// ExpiresAt is the expiry the database reported at the last acquire or
// renew, by the database's clock. For display; never compare it with this
// machine's clock.
func (l *Lease) ExpiresAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiresAt
}

// lose ends the lease with cause, once. It reports whether this call ended it.
func (l *Lease) lose(cause error) bool {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return false
	}
	l.ended = true
	l.stopTimers()
	l.mu.Unlock()
	l.cancel(cause)
	l.c.cfg.logger.Warn("pglease: lease lost", "key", l.key, "fence", l.fence, "cause", cause)
	return true
}

// stopTimers stops both timers; l.mu is held.
func (l *Lease) stopTimers() {
	l.timer.Stop()
	if l.renewTimer != nil {
		l.renewTimer.Stop()
	}
}

func (l *Lease) deadlinePassed() {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	if left := time.Until(l.deadline); left > 0 { // a renewal moved it
		l.timer.Reset(left)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	if l.lose(l.lostError(keepalive.LocalDeadline)) {
		l.lostAtDeadline()
		// The server may still count it as held (a renewal may have landed
		// unseen): give it back so the next holder need not wait out the TTL.
		// This runs on the timer's own goroutine, tracked so Close waits.
		if !l.c.track() {
			return // Close releases it
		}
		defer l.c.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l.releaseRow(ctx)
		l.forget()
	}
}

func (l *Lease) forget() {
	l.c.mu.Lock()
	delete(l.c.leases, l)
	l.c.mu.Unlock()
}

// Renew extends the lease by its TTL (the one it was acquired with) from the
// database's now(), only if it is still unexpired and still carries this
// fence. pgfence.ErrLeaseLost means it had expired or another owner holds the key:
// the lease's context ends at once. Any other error is transient; the lease
// stays valid until its local deadline. Renew is what auto-renewal calls; call it yourself only with
// WithoutAutoRenew.
func (l *Lease) Renew(ctx context.Context) error {
	if err := l.renewable(); err != nil {
		return err
	}
	sent := time.Now()
	var expiresAt time.Time
	var err error
	if l.c.renewHook != nil {
		expiresAt, err = l.c.renewHook(ctx, l)
	} else {
		expiresAt, err = l.renewRow(ctx)
	}
	return l.renewed(ctx, sent, expiresAt, err)
}

// renewable is nil while l may be renewed, else what Renew returns.
func (l *Lease) renewable() error {
	l.mu.Lock()
	ended, released := l.ended, l.released
	l.mu.Unlock()
	if released {
		return &pgfence.LeaseLostError{Key: l.key, Fence: l.fence, Cause: "released"}
	}
	if ended {
		return context.Cause(l.ctx)
	}
	return nil
}

// renewed records the answer to a renewal sent at sent: the new expiry, or
// pgx.ErrNoRows (the lease was gone: it is lost), or another error.
func (l *Lease) renewed(ctx context.Context, sent, expiresAt time.Time, err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		cause := l.lostError(keepalive.Gone)
		if l.lose(cause) {
			l.lostOnRenew(ctx)
		}
		return cause
	}
	if err != nil {
		return fmt.Errorf("pglease: renewing %q: %w", l.key, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return context.Cause(l.ctx)
	}
	l.expiresAt = expiresAt
	l.deadline = l.c.schedule(l.ttl).Extend(l.deadline, sent) // the running timer notices on firing
	return nil
}

// renewFailed counts and logs an auto-renewal that failed transiently.
func (l *Lease) renewFailed(err error) {
	l.c.met.renewFailed()
	l.c.cfg.logger.Warn("pglease: renewal failed; retrying until the local deadline", "key", l.key, "fence", l.fence, "err", err)
}

// renewDue runs on the renew timer's goroutine: one auto-renewal attempt,
// then the next one is scheduled. A transient failure is retried soon, until
// the local deadline ends the lease; a definite "lost" ends it at once.
func (l *Lease) renewDue() {
	l.renewing <- struct{}{}
	defer func() { <-l.renewing }()
	l.mu.Lock()
	if l.stopping || l.ended || l.inSet {
		l.mu.Unlock()
		return
	}
	deadline := l.deadline
	l.mu.Unlock()

	// The attempt may last until the local deadline, no longer.
	ctx, cancel := context.WithDeadline(l.ctx, deadline)
	err := l.Renew(ctx)
	cancel()

	switch {
	case errors.Is(err, pgfence.ErrLeaseLost) || l.ctx.Err() != nil:
		return
	case err != nil:
		l.renewFailed(err)
	}
	next := l.c.schedule(l.ttl).Next(err == nil)
	l.mu.Lock()
	if !l.stopping && !l.ended && !l.inSet {
		l.renewTimer.Reset(next)
	}
	l.mu.Unlock()
}

// Release gives the lease up: it expires now, by the database clock, but the
// row stays. The release commits asynchronously unless the client was made
// WithDurableRelease: a release lost in a server crash only makes the lease
// run to its TTL. It is matched on key and fence, so a newer holder's lease is
// never touched. It returns pgfence.ErrLeaseLost when the lease had already expired
// or another owner had taken the key: the caller's work may have run
// unprotected for a while, which is worth knowing. The lease's context ends
// with ErrReleased. Release after a successful Release is a no-op; after a
// transient error it may be called again. It returns by ctx's deadline
// (plus a few milliseconds), even while an auto-renewal is in flight.
func (l *Lease) Release(ctx context.Context) error {
	if done, err := l.stopForRelease(ctx); done || err != nil {
		return err
	}
	released, err := l.releaseRow(ctx)
	return l.releasedRow(ctx, released, err)
}

// stopForRelease stops l's renewals and waits out one in flight, so that
// none races the release, no longer than ctx (a renewal is bounded by the
// local deadline). done: l was released already, there is nothing to send.
func (l *Lease) stopForRelease(ctx context.Context) (done bool, err error) {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return true, nil
	}
	l.stopping = true
	if l.renewTimer != nil {
		l.renewTimer.Stop()
	}
	l.mu.Unlock()
	select {
	case l.renewing <- struct{}{}:
		<-l.renewing
		return false, nil
	case <-ctx.Done():
		return false, fmt.Errorf("pglease: releasing %q: a renewal was still in flight: %w (it expires by itself at its TTL)", l.key, context.Cause(ctx))
	}
}

// releasedRow ends l after its release statement answered: released (it
// was still held), or not (err nil: it had expired or been taken), or err.
func (l *Lease) releasedRow(ctx context.Context, released bool, err error) error {
	var taken bool // another owner holds the key (else: it had expired)
	if err == nil && !released {
		// The uncommon path: nothing was held. Which way was it lost?
		var current int64
		current, err = l.currentFence(ctx)
		taken = err != nil || current != l.fence
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil // the row was swept: someone else's now, or nobody's
		}
	}
	if err != nil {
		// Not released: renewals stay stopped, the local deadline still
		// ends the lease, and Release may be called again.
		return fmt.Errorf("pglease: releasing %q: %w (it expires by itself at its TTL)", l.key, err)
	}
	l.mu.Lock()
	wasEnded := l.ended
	l.released = true
	l.ended = true
	l.timer.Stop()
	l.mu.Unlock()
	l.forget()
	if !wasEnded {
		l.endedAtRelease(released, taken)
	}

	var result error
	switch {
	case taken:
		result = fmt.Errorf("%w; their lease was left alone", l.lostError(keepalive.TakenOver))
	case !released:
		result = fmt.Errorf("%w before it was released", l.lostError(keepalive.Expired))
	}
	if result != nil {
		l.cancel(result)
	} else {
		l.cancel(releasedError{l.key, l.fence})
	}
	return result
}

// release expires the lease (key, fence) if it is still held, in one
// statement: the notifying variant with WithWakeOnRelease, asynchronously
// committed unless WithDurableRelease. released is false when nothing was
// held any more.
func (c *Client) release(ctx context.Context, key string, fence int64) (released bool, err error) {
	durable := c.cfg.durableRelease
	if c.cfg.wakeOnRelease {
		released, err = c.own(ctx).ReleaseNotify(ctx, fencesql.ReleaseNotifyParams{LockKey: key, Fence: fence, Durable: durable})
	} else {
		released, err = c.queries(ctx).Release(ctx, fencedb.ReleaseParams{LockKey: key, Fence: fence, Durable: durable})
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return released, err
}

// releasedError is the cause of a released lease's context. Its text is
// built only when someone asks for it: most releases are never inspected,
// and formatting it on every release was a visible share of the client's
// allocations per acquire + release.
type releasedError struct {
	key   string
	fence int64
}

func (e releasedError) Error() string {
	return fmt.Sprintf("%v: %q (fence %d)", ErrReleased, e.key, e.fence)
}

func (e releasedError) Unwrap() error { return ErrReleased }
