package pglease

import (
	"context"
	"slices"
	"time"
)

// defaultObserveInterval is how often Observe reads the holder when nothing
// wakes it earlier. One observer costs one indexed single-row read per
// interval.
const defaultObserveInterval = 200 * time.Millisecond

// Observe watches who holds key, for followers of a leader elected with
// Campaign (the holder's Fence is the epoch) and for dashboards. The channel
// receives the current holder at once, then every change: a new grant (a new
// Fence, whoever the owner), the end of a lease (Held false, with the last
// holder's Owner and Fence; released or expired), and, while the key is held
// shared or as permits, a holder that ends (Holders lists those left). A key never leased (or
// whose row was swept before Observe began) is Holder{Key: key} with Held
// false; a sweep while it watches is not a change (the last Fence stands, so
// fences never go back). Renewals are not changes. Remaining is as of the
// read that saw the change.
//
// The channel holds at most one value and a newer one replaces an unread
// older one: a slow reader gets the latest state, never a backlog, so it may
// miss short terms in between (fences still rise, so it can tell). The
// channel is closed when ctx ends or the client is closed.
//
// Observe polls every 200ms, so a change of holder is seen within that, and
// also reads at the moment the current lease is due to expire. With
// WithWakeOnRelease it also reads as soon as a release of key is notified (the client's listener serves Acquire
// and Observe alike); the new holder, who sends no notification, is then seen
// at the next poll. Read errors after the first are logged and retried at the
// next poll; the first read's error is returned, as are pgfence.ErrInvalidInput for a
// bad key and ErrClosed after Close.
func (c *Client) Observe(ctx context.Context, key string) (<-chan Holder, error) {
	if err := validateKey(key); err != nil {
		return nil, err
	}
	if !c.track() {
		return nil, ErrClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	stopOnClose := context.AfterFunc(c.closing, cancel)
	var woken <-chan struct{} // nil, never ready, without WithWakeOnRelease
	unsubscribe := func() {}
	if c.wake != nil {
		// Before the first read, so that no release after it goes unheard.
		woken, unsubscribe = c.wake.subscribe(wakeAddr{wakeChannel, key})
		c.wake.start()
	}
	end := func() {
		unsubscribe()
		stopOnClose()
		cancel()
		c.wg.Done()
	}
	first, err := c.observeRead(ctx, key)
	if err != nil {
		end()
		return nil, err
	}
	ch := make(chan Holder, 1)
	ch <- first
	go func() {
		defer end()
		defer close(ch)
		c.observeLoop(ctx, key, first, ch, woken)
	}()
	return ch, nil
}

// observeLoop reads the holder after each poll interval, expiry or wake-up
// and offers it on ch when it changed, until ctx ends.
func (c *Client) observeLoop(ctx context.Context, key string, last Holder, ch chan Holder, woken <-chan struct{}) {
	cur := last
	for {
		wait := c.cfg.observePoll
		if cur.Held {
			// +1ms: the lease is still held at exactly its expiry instant.
			wait = min(wait, cur.Remaining+time.Millisecond)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-woken:
			t.Stop()
		}
		h, err := c.observeRead(ctx, key)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.cfg.logger.Warn("pglease: observe read failed, retrying", "key", key, "err", err)
			cur.Held = false // wait a full interval, not until an expiry already passed
			continue
		}
		if h.Fence == 0 && last.Fence != 0 {
			// The row was swept after its lease ended: the last grant's
			// fence still stands, and a 0 would run fences backwards.
			h, h.Held, h.Remaining, h.Holders = last, false, 0, nil
		}
		cur = h
		// One grant is one fence: a renewal keeps it, a new grant (even to
		// the same owner) takes a new one, and an end clears Held; a shared
		// holder or permit that ends changes the holders' fences.
		if h.Fence != last.Fence || h.Held != last.Held || !sameFences(h.Holders, last.Holders) {
			last = h
			offerLatest(ch, h)
		}
	}
}

// observeRead is Holder, with a never-leased key as a Holder that is not held.
func (c *Client) observeRead(ctx context.Context, key string) (Holder, error) {
	h, ok, err := c.Holder(ctx, key)
	if err != nil {
		return Holder{}, err
	}
	if !ok {
		return Holder{Key: key}, nil
	}
	return h, nil
}

// sameFences reports whether a and b are the same grants (one fence each).
func sameFences(a, b []Holder) bool {
	return slices.EqualFunc(a, b, func(x, y Holder) bool { return x.Fence == y.Fence })
}

// offerLatest puts h on ch (buffer 1) without blocking, replacing an unread
// older value. The caller is ch's only sender, so after a receive frees the
// slot the next send succeeds.
func offerLatest(ch chan Holder, h Holder) {
	for {
		select {
		case ch <- h:
			return
		default:
		}
		select {
		case <-ch:
		default:
		}
	}
}
