package pglease

import (
	"context"
	"sync"
	"time"

	"github.com/pgfence/pgfence/internal/listen"
	"github.com/pgfence/pgfence/internal/otelx"
)

// wakeChannel is the channel on which Release and ReleaseByOwnerToken send
// NOTIFY with the released key as payload (queries/internal/leases.sql).
const wakeChannel = "pgfence_lease_released"

// waker keeps one listener (internal/listen) for a client made with
// WithWakeOnRelease: each waiter in Acquire or Observe subscribes to its key
// (the notification's payload), so a release wakes that key's waiters, and
// a (re)connection of the listener wakes them all, since releases meanwhile
// went unheard. It only shortens waits: every waiter keeps its backoff
// timer, so a lost notification (listener down, lease expired by its TTL,
// which sends none) costs at most one backoff sleep.
type waker struct {
	c    *Client
	l    *listen.Listener
	ctx  context.Context // ends on Client.Close
	stop context.CancelFunc

	mu      sync.Mutex
	started bool
}

func newWaker(c *Client) *waker {
	ctx, stop := context.WithCancel(context.Background())
	pool, pooled := c.pool, "pglease: the client's pool goes through a transaction or statement pooler (PgBouncer in "+
		"transaction mode, say), where LISTEN cannot work; no LISTEN is sent and waiters poll instead of waking on release: "+
		"give WithWakeOnRelease a pool that connects directly to PostgreSQL"
	if c.cfg.listenPool != nil {
		pool, pooled = c.cfg.listenPool, "pglease: the pool given to WithWakeOnRelease goes through a transaction or statement "+
			"pooler too, where LISTEN cannot work; no LISTEN is sent and waiters poll instead of waking on release: "+
			"connect that pool directly to PostgreSQL (or through a session pooler)"
	}
	disabled := otelx.ListenDisabled(otelx.Meter(c.cfg.meterProvider, meterName))
	l := listen.New(pool, listen.Config{
		OnError: func(err error, retryIn time.Duration) {
			c.cfg.logger.Warn("pglease: wake-on-release listener failed; waiters poll until it reconnects",
				"err", err, "retry_in", retryIn)
		},
		OnPooled: func() {
			c.cfg.logger.Warn(pooled)
			disabled.Add(context.Background(), 1)
		},
	})
	// A fair client's waiters' channel is LISTENed from the listener's
	// first connection, so that a waiter arriving while no other waits
	// sends no LISTEN (a valid identifier: never an error).
	if c.cfg.fair {
		l.Keep(c.fairAddr("").channel)
	}
	return &waker{c: c, l: l, ctx: ctx, stop: stop}
}

// hearsWakeups tells whether a wake-up can come now: the client has a
// listener and it is listening. A fair waiter polls near the backoff's
// minimum unless it does (queuedSleep): while the listener starts, while it
// reconnects, and for good behind a transaction pooler.
func (c *Client) hearsWakeups() bool { return c.wake != nil && c.wake.l.PID() != 0 }

// wakeAddr is where a waiter's wake-up comes: a channel, and the payload
// its notifications carry.
type wakeAddr struct{ channel, payload string }

// wakeIDLen is the length of a client's wake ID, in hex digits.
const wakeIDLen = 8

// fairToken is a fair waiter's owner token: "wake.", the client's wake ID,
// a dot, and 96 random bits in hex. The database sends the waiter's wake-up
// on the channel the wake ID names (pgfence_wake_channel, migration
// 000012), so a release wakes one client's listener, not every client's.
func (c *Client) fairToken() string { return "wake." + c.wakeID + "." + newToken()[wakeIDLen:] }

// fairAddr is where the fair waiter of token is woken.
func (c *Client) fairAddr(token string) wakeAddr {
	return wakeAddr{"pgfence_wake_" + c.wakeID, token}
}

// subscribe registers a waiter at a. The channel (buffer 1) receives when
// a notification for a comes, or when the listener (re)connects and may
// have missed one. Subscribing before the first attempt closes the window
// between a failed attempt and the subscription.
func (w *waker) subscribe(a wakeAddr) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	unsubscribe, err := w.l.Subscribe(a.channel, a.payload, ch)
	if err != nil { // not for a valid channel name and a channel: never
		return nil, func() {}
	}
	return ch, unsubscribe
}

// start starts the listener on the first wait, once, unless the client is
// closed. The goroutine is counted in the client's WaitGroup, so Close
// waits for it.
func (w *waker) start() {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return
	}
	w.started = true
	w.mu.Unlock()
	if !w.c.track() {
		return
	}
	go func() {
		defer w.c.wg.Done()
		w.l.Run(w.ctx) // nil once ctx ends; started once, so never ErrRunning
	}()
}
