package pglease

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/internal/fencesql"
	"github.com/pgfence/pgfence/internal/pgerr"
)

// WithFairWaiting makes Acquire wait in a first come, first served queue
// kept by the database: each waiter takes a place (a ticket from a
// sequence) on its first attempt, and only the first unexpired place of a
// key may be granted it, so waiters across processes are granted the lease
// in the order they started waiting. A waiter that gives up (its context
// ends, or its maximum wait passes) leaves the queue at once; one that dies
// leaves it when its place expires, a few seconds after its last attempt
// (fairPlace). TryAcquire never takes a place, nor looks at the queue: it
// takes a free key even while others wait, as a caller that cannot wait
// needs.
//
// With WithWakeOnRelease too, a release by this client wakes only the first
// waiter of the key (NOTIFY with that waiter's owner token as the payload),
// not every waiter; the others keep sleeping their backoff. Default: off;
// waiters retry with jittered backoff in no particular order.
//
// Fair waiting applies to mutex leases (Acquire, Do); semaphores,
// shared/exclusive leases and key sets wait by backoff.
func WithFairWaiting() Option {
	return func(c *config) error { c.fair = true; return nil }
}

// fairPlace is how long a fair waiter's place outlives its last attempt:
// long enough for the longest backoff sleep between two attempts, so a live
// waiter never loses its place, and short enough that a dead one holds up
// the queue only briefly.
func (c *Client) fairPlace() time.Duration {
	return max(3*c.cfg.backoffMax, 3*time.Second)
}

// acquireFair is Acquire with WithFairWaiting.
func (c *Client) acquireFair(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	token := newToken()
	subscribed := token
	l, err := c.waitFor(ctx, key, subscribed, func(ctx context.Context) (*Lease, error) {
		l, err := c.tryFair(ctx, key, token, ttl)
		if err != nil && !errors.Is(err, ErrNotAcquired) {
			// An attempt whose outcome was settled by tombstoning the
			// token (or that failed): the place is gone with it; the
			// next attempt queues afresh under a new token.
			c.leaveQueue(ctx, key, token)
			token = newToken()
		}
		return l, err
	})
	if err != nil {
		c.leaveQueue(ctx, key, token)
	}
	return l, err
}

// leaveQueue removes token's place in key's queue, also when ctx has ended
// (giving up is the usual reason to leave): within a few seconds, best
// effort; a place left behind expires by itself.
func (c *Client) leaveQueue(ctx context.Context, key, token string) {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	c.own(lctx).LeaveQueue(lctx, fencesql.LeaveQueueParams{LockKey: key, OwnerToken: token})
}

// tryFair is one attempt of a fair waiter under token: granted only when no
// unexpired place of the key is ahead of token's.
func (c *Client) tryFair(ctx context.Context, key, token string, ttl time.Duration) (*Lease, error) {
	sent := time.Now()
	row, err := c.own(ctx).AcquireFIFO(ctx, fencesql.AcquireFIFOParams{
		LockKey: key, Owner: c.cfg.owner, OwnerToken: token, TtlMicros: ttl.Microseconds(),
		PlaceMicros: c.fairPlace().Microseconds()})
	switch {
	case err == nil && row.Fence > 0:
		return c.startLease(key, token, row.Fence, row.ExpiresAt, ttl, sent)
	case err == nil:
		c.stats.notAcquired.Add(1)
		return nil, &queuedError{key: key, ahead: int(row.Ahead)}
	case errors.Is(err, pgx.ErrNoRows):
		return nil, notAcquired(key)
	case pgerr.IsLockNotAvailable(err):
		c.stats.notAcquired.Add(1)
		return nil, fmt.Errorf("%w: %q (another acquisition was in progress)", ErrNotAcquired, key)
	case mayHaveExecuted(err):
		c.stats.ambiguous.Add(1)
		return c.resolveAmbiguous(ctx, key, token, ttl, sent, err, 1)
	default:
		return nil, c.explain(key, err)
	}
}

// queuedError is a fair waiter's refusal: ahead waiters are before it.
type queuedError struct {
	key   string
	ahead int
}

func (e *queuedError) Error() string {
	return fmt.Sprintf("%v: %q (%d waiters ahead)", ErrNotAcquired, e.key, e.ahead)
}

// Is reports ErrNotAcquired.
func (e *queuedError) Is(target error) bool { return target == ErrNotAcquired }

// fairRefresh is how often a fair waiter behind others refreshes its place
// when releases wake the first waiter: a third of the place's life.
func (c *Client) fairRefresh() time.Duration { return c.fairPlace() / 3 }

// queuedSleep is the sleep after a failed attempt: backoff, with two
// exceptions for fair waiters. One behind others, on a client whose
// releases wake the first waiter, cannot be granted the lease before it is
// first, and learns that it is from the release of the waiter before it
// (or, if that one dies, from its next refresh): it only refreshes its
// place, so the statements per hand-off stay the same however many wait.
// Without wake-on-release, the first waiter learns of the release only by
// polling, and the second of its turn coming; their backoff grew while they
// queued, so they poll near the backoff's minimum instead (two waiters per
// key do).
func (c *Client) queuedSleep(err error, backoff time.Duration) time.Duration {
	var q *queuedError
	switch {
	case !errors.As(err, &q):
		return backoff
	case c.wake != nil && q.ahead > 0:
		return c.fairRefresh()
	case c.wake == nil && q.ahead <= 1:
		return min(backoff, time.Duration(mrand.Int64N(int64(c.cfg.backoffMin)))+c.cfg.backoffMin/2)
	}
	return backoff
}
