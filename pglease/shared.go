package pglease

import (
	"context"
	"time"
)

// Shared leases (read-write locking): a key is held by any number of
// unexpired shared leases, or by one exclusive lease, which is what Acquire
// and TryAcquire take: a plain lease is the exclusive kind. Each grant is a
// *Lease with its own fence from the one fence source, so every grant's
// fence is above every earlier grant's of either kind, and a resource that
// records the newest fence it accepted refuses a stale reader's write as it
// refuses a stale writer's.
//
// Writer preference: while an Acquire of a key held shared (or as permits)
// waits, no new shared lease (or permit) of it is granted, so a stream of
// shared acquirers cannot starve it. The waiter's
// place is a row with an expiry of its own, refreshed on every attempt: a
// waiter that gives up removes it, one that dies stops blocking shared
// acquirers when it expires (exclusiveWaitPlace after its last attempt).
// TryAcquire never takes a place.
//
// A key held as a semaphore cannot be taken shared, nor a key held shared
// be taken as a semaphore: ErrPermitsMismatch.

// exclusiveWaitPlace is how long an exclusive waiter's place outlives its
// last attempt.
func (c *Client) exclusiveWaitPlace() time.Duration {
	return max(2*c.cfg.backoffMax, 2*time.Second)
}

// TryAcquireShared takes a shared lease on key for ttl, or returns
// pgfence.ErrNotAcquired at once when an exclusive lease is held or waited for
// (ErrPermitsMismatch when the key is held as a semaphore).
func (c *Client) TryAcquireShared(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	if err := c.checkArgs(key, ttl); err != nil {
		return nil, err
	}
	start := time.Now()
	l, err := c.grantSlot(ctx, key, ttl, leaseRow{shared: true}, c.sendKind(key, kindShared, 0, ttl, 0))
	c.met.acquired(opTry, start, err)
	return l, err
}

// AcquireShared takes a shared lease, waiting as Acquire waits while an
// exclusive lease is held or waited for; with WithFairWaiting, in the key's
// queue.
func (c *Client) AcquireShared(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	if err := c.checkArgs(key, ttl); err != nil {
		return nil, err
	}
	row := leaseRow{shared: true}
	if c.cfg.fair {
		return c.waitInQueue(ctx, key, func(ctx context.Context, token string) (*Lease, error) {
			return c.grantSlotAs(ctx, key, ttl, row, token, c.sendQueued(key, kindShared, 0, ttl))
		})
	}
	return c.waitFor(ctx, key, key, func(ctx context.Context) (*Lease, error) {
		return c.grantSlot(ctx, key, ttl, row, c.sendKind(key, kindShared, 0, ttl, 0))
	})
}

// acquireExclusive is Acquire without WithFairWaiting: the first attempt is
// TryAcquire's; a refused one goes on as an exclusive waiter, whose place,
// keyed by one owner token for every attempt, keeps new shared leases and
// permits out while the key is held shared or as permits. When it returns without a lease, it gives
// its place up.
func (c *Client) acquireExclusive(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	first := true
	var token string // the waiter's place; "" until an attempt takes one
	l, err := c.waitFor(ctx, key, key, func(ctx context.Context) (*Lease, error) {
		if first {
			first = false
			return c.acquire(ctx, key, ttl)
		}
		return c.exclusiveAttempt(ctx, key, ttl, &token)
	})
	if err != nil && token != "" {
		c.leaveQueue(ctx, key, token)
	}
	return l, err
}

// exclusiveAttempt sends one attempt of an exclusive waiter under *token
// (a new one when empty), the owner token its place is keyed by, which is
// refreshed rather than left to expire. The token is also what an
// ambiguous attempt is settled by, so a waiter never reuses the token of an
// attempt whose answer was lost (grantSlotAs tombstones it): it starts a new
// place instead.
func (c *Client) exclusiveAttempt(ctx context.Context, key string, ttl time.Duration, token *string) (*Lease, error) {
	if *token == "" {
		*token = newToken()
	}
	l, err := c.grantSlotAs(ctx, key, ttl, leaseRow{}, *token, c.sendKind(key, kindExclusive, 0, ttl, c.exclusiveWaitPlace()))
	if err != nil && !isNotAcquired(err) {
		// Settled (tombstoned) or failed: its place, if it has one, goes
		// now, and the next attempt starts afresh.
		c.leaveQueue(ctx, key, *token)
		*token = ""
	}
	return l, err
}
