package pglease

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/fencesql"
)

// WithFairWaiting makes every Acquire wait in a first come, first served
// queue kept by the database, for every kind of key: a mutex lease
// (Acquire, Do), a semaphore's permit and a shared or the exclusive lease.
// Each waiter takes a place (a ticket from a sequence) on its first
// attempt, and only the first unexpired places of a key may be granted, so
// waiters across processes are granted in the order they started waiting:
// a semaphore's free permits go to the first waiters in the queue; a shared
// waiter behind an exclusive one waits for it (writer preference is FIFO
// order), and consecutive shared waiters are granted together. A waiter
// that gives up (its context ends, or its maximum wait passes) leaves the
// queue at once; one that dies leaves it when its place expires, a few
// seconds after its last attempt (fairPlace). TryAcquire, of any kind,
// never takes a place, nor looks at the queue: it takes what is free even
// while others wait, as a caller that cannot wait needs. Key sets wait by
// backoff.
//
// Whoever releases, the database wakes only the first waiters that could
// be granted (NOTIFY with their owner tokens as the payloads, from a
// trigger on the release), not every waiter. A waiter hears it with
// WithWakeOnRelease (behind a transaction pooler, with a listen pool);
// the others keep sleeping, and so the statements per hand-off stay the
// same however many wait. Without wake-ups a waiter polls. Default: off; waiters retry with jittered backoff in no
// particular order.
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

// acquireFair is Acquire with WithFairWaiting: an exclusive waiter in the
// key's queue.
func (c *Client) acquireFair(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	return c.waitInQueue(ctx, key, func(ctx context.Context, token string) (*Lease, error) {
		return c.grantSlotAs(ctx, key, ttl, leaseRow{}, token, c.sendQueued(key, kindExclusive, 0, ttl))
	})
}

// waitInQueue is the wait of a fair waiter of any kind: every attempt runs
// under the waiter's owner token, which keeps its place in the key's queue. An
// attempt whose outcome was settled by tombstoning the token (or that
// failed) loses the place with it, and the next attempt queues afresh under
// a new token; a waiter that returns without a lease leaves the queue.
func (c *Client) waitInQueue(ctx context.Context, key string, attempt func(ctx context.Context, token string) (*Lease, error)) (*Lease, error) {
	token := c.fairToken()
	l, err := c.waitWoken(ctx, key, func() wakeAddr { return c.fairAddr(token) }, func(ctx context.Context) (*Lease, error) {
		l, err := attempt(ctx, token)
		if err != nil && !errors.Is(err, pgfence.ErrNotAcquired) {
			c.leaveQueue(ctx, key, token)
			token = c.fairToken()
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

// queuedGrant turns a fair waiter's attempt at a slot into grantSlotAs's
// answer: a grant, or a refusal with the number of waiters ahead.
func queuedGrant(key string, g slotGrant, ahead int32, err error) (slotGrant, error) {
	switch {
	case err != nil:
		return g, err
	case g.Fence > 0:
		return g, nil
	case ahead < 0:
		return g, errAbandonedPlace
	}
	return g, &queuedError{key: key, ahead: int(ahead)}
}

// errAbandonedPlace: the waiter's owner token was tombstoned (its answer was
// lost on an earlier attempt) while it still waited. Not pgfence.ErrNotAcquired:
// the wait goes on under a new token.
var errAbandonedPlace = errors.New("pglease: the waiter's place was given up; queueing again")

// queuedError is a fair waiter's refusal: ahead waiters are before it.
type queuedError struct {
	key   string
	ahead int
}

func (e *queuedError) Error() string {
	return fmt.Sprintf("%v: %q (%d waiters ahead)", pgfence.ErrNotAcquired, e.key, e.ahead)
}

// Is reports pgfence.ErrNotAcquired.
func (e *queuedError) Is(target error) bool { return target == pgfence.ErrNotAcquired }

// fairRefresh is how often a fair waiter behind others refreshes its place
// when it hears wake-ups: a third of the place's life.
func (c *Client) fairRefresh() time.Duration { return c.fairPlace() / 3 }

// queuedSleep is the sleep after a failed attempt: backoff, with two
// exceptions for fair waiters. One behind others that hears wake-ups
// (WithWakeOnRelease, its listener listening: hearsWakeups) cannot be granted before the waiters ahead of it, and
// the database wakes it when it could be (a release, or a waiter ahead
// leaving the queue; if a wake-up is lost, its next refresh finds out): it
// only refreshes its place, so the statements per hand-off stay the same
// however many wait. Without wake-ups, the first waiter learns of a release
// only by polling, and the second of its turn coming; their backoff grew
// while they queued, so they poll near the backoff's minimum instead (two
// waiters per key do).
func (c *Client) queuedSleep(err error, backoff time.Duration) time.Duration {
	var q *queuedError
	switch {
	case !errors.As(err, &q):
		return backoff
	case c.hearsWakeups() && q.ahead > 0:
		return c.fairRefresh()
	case !c.hearsWakeups() && q.ahead <= 1:
		return min(backoff, time.Duration(mrand.Int64N(int64(c.cfg.backoffMin)))+c.cfg.backoffMin/2)
	}
	return backoff
}
