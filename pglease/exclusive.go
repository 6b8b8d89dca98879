package pglease

import (
	"context"
	"time"
)

// exclusiveWaitPlace is how long an exclusive waiter's place outlives its
// last attempt.
func (c *Client) exclusiveWaitPlace() time.Duration {
	return max(2*c.cfg.backoffMax, 2*time.Second)
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
