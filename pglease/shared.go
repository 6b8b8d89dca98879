package pglease

import (
	"context"
	"time"

	"github.com/pgfence/pgfence/internal/fencesql"
)

// Shared and exclusive leases (read-write): a key of this kind has any
// number of unexpired shared leases, or one exclusive lease. Each grant is a
// *Lease with its own fence from the one fence source, so every grant's
// fence is above every earlier grant's of either kind, and a resource that
// records the newest fence it accepted refuses a stale reader's write as it
// refuses a stale writer's.
//
// Writer preference: while an AcquireExclusive waits, no new shared lease is
// granted (TryAcquireShared and AcquireShared are refused), so a stream of
// shared acquirers cannot starve it. The waiter's place is a row with an
// expiry of its own, refreshed on every attempt: a waiter that gives up
// removes it, one that dies stops blocking shared acquirers when it expires
// (exclusiveWaitPlace after its last attempt). TryAcquireExclusive never
// takes a place.
//
// Shared/exclusive keys share the semaphores' namespace (ErrPermitsMismatch
// when a key is used as both), not the mutex leases'.

// exclusiveWaitPlace is how long an exclusive waiter's place outlives its
// last attempt.
func (c *Client) exclusiveWaitPlace() time.Duration {
	return max(2*c.cfg.backoffMax, 2*time.Second)
}

// TryAcquireShared takes a shared lease on key for ttl, or returns
// ErrNotAcquired at once when an exclusive lease is held or waited for.
func (c *Client) TryAcquireShared(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	return c.trySharedOnce(ctx, key, ttl, false, 0)
}

// AcquireShared takes a shared lease, waiting as Acquire waits while an
// exclusive lease is held or waited for; with WithFairWaiting, in the key's
// queue.
func (c *Client) AcquireShared(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	if err := c.checkArgs(key, ttl); err != nil {
		return nil, err
	}
	if c.cfg.fair {
		return c.acquireSharedFair(ctx, key, ttl, false)
	}
	return c.waitFor(ctx, key, key, func(ctx context.Context) (*Lease, error) { return c.tryShared(ctx, key, ttl, false, 0) })
}

// TryAcquireExclusive takes the exclusive lease on key for ttl, or returns
// ErrNotAcquired at once when any lease of the key is held. It does not
// queue.
func (c *Client) TryAcquireExclusive(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	return c.trySharedOnce(ctx, key, ttl, true, 0)
}

// AcquireExclusive takes the exclusive lease, waiting as Acquire waits until
// no lease of the key is held. While it waits, no new shared lease is
// granted; when it returns without a lease, it gives its place up. With
// WithFairWaiting it waits in the key's queue.
func (c *Client) AcquireExclusive(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	if err := c.checkArgs(key, ttl); err != nil {
		return nil, err
	}
	if c.cfg.fair {
		return c.acquireSharedFair(ctx, key, ttl, true)
	}
	var token string // one owner token for every attempt: the waiter's place
	l, err := c.waitFor(ctx, key, key, func(ctx context.Context) (*Lease, error) {
		l, tok, err := c.sharedAttempt(ctx, key, ttl, true, c.exclusiveWaitPlace(), token)
		token = tok
		return l, err
	})
	if err != nil && token != "" {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		c.own(lctx).LeaveExclusiveQueue(lctx, fencesql.LeaveExclusiveQueueParams{LockKey: key, OwnerToken: token})
	}
	return l, err
}

func (c *Client) trySharedOnce(ctx context.Context, key string, ttl time.Duration, exclusive bool, wait time.Duration) (*Lease, error) {
	if err := c.checkArgs(key, ttl); err != nil {
		return nil, err
	}
	start := time.Now()
	l, err := c.tryShared(ctx, key, ttl, exclusive, wait)
	c.met.acquired(opTry, start, err)
	return l, err
}

func (c *Client) tryShared(ctx context.Context, key string, ttl time.Duration, exclusive bool, wait time.Duration) (*Lease, error) {
	l, _, err := c.sharedAttempt(ctx, key, ttl, exclusive, wait, "")
	return l, err
}

// sharedAttempt sends one acquisition of a shared or the exclusive lease.
// The waiter's place of an exclusive request is keyed by its owner token:
// placeToken, when not empty, is the token of the previous attempt's place,
// which is refreshed rather than left to expire; the token used is returned.
// A granted attempt's token is the lease's. The place token is also what
// an ambiguous attempt is settled by, so a waiter never reuses the token of
// an attempt whose answer was lost (grantSlot tombstones it): it starts a
// new place instead.
func (c *Client) sharedAttempt(ctx context.Context, key string, ttl time.Duration, exclusive bool, wait time.Duration, placeToken string) (*Lease, string, error) {
	row := leaseRow{permit: true, shared: !exclusive}
	used := placeToken
	l, err := c.grantSlotAs(ctx, key, ttl, row, placeToken, func(ctx context.Context, q *fencesql.Queries, token string) (slotGrant, error) {
		used = token
		r, err := q.AcquireShared(ctx, fencesql.AcquireSharedParams{
			LockKey: key, Exclusive: exclusive, Owner: c.cfg.owner, OwnerToken: token,
			TtlMicros: ttl.Microseconds(), WaitMicros: wait.Microseconds()})
		return slotGrant(r), err
	})
	if err != nil && !isNotAcquired(err) {
		used = "" // settled (tombstoned) or failed: the next attempt starts afresh
	}
	return l, used, err
}

// acquireSharedFair is AcquireShared or AcquireExclusive with
// WithFairWaiting.
func (c *Client) acquireSharedFair(ctx context.Context, key string, ttl time.Duration, exclusive bool) (*Lease, error) {
	row := leaseRow{permit: true, shared: !exclusive}
	return c.waitInQueue(ctx, key, true, func(ctx context.Context, token string) (*Lease, error) {
		return c.grantSlotAs(ctx, key, ttl, row, token, func(ctx context.Context, q *fencesql.Queries, token string) (slotGrant, error) {
			r, err := q.AcquireSharedFIFO(ctx, fencesql.AcquireSharedFIFOParams{
				LockKey: key, Exclusive: exclusive, Owner: c.cfg.owner, OwnerToken: token,
				TtlMicros: ttl.Microseconds(), PlaceMicros: c.fairPlace().Microseconds()})
			return queuedGrant(key, slotGrant{Slot: r.Slot, Fence: r.Fence, ExpiresAt: r.ExpiresAt}, r.Ahead, err)
		})
	})
}
