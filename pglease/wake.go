package pglease

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/pgfence/pgfence/internal/listen"
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
	l := listen.New(c.pool, listen.Config{OnError: func(err error, retryIn time.Duration) {
		c.cfg.logger.Warn("pglease: wake-on-release listener failed; waiters poll until it reconnects",
			"err", err, "retry_in", retryIn)
	}})
	return &waker{c: c, l: l, ctx: ctx, stop: stop}
}

// subscribe registers a waiter for key. The channel (buffer 1) receives when
// key is released, or when the listener (re)connects and may have missed a
// release. Subscribing before the first attempt closes the window between a
// failed attempt and the subscription.
func (w *waker) subscribe(key string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	channel := wakeChannel
	if strings.HasPrefix(key, w.c.wakeID+"-") {
		channel = "pgfence_wake_" + w.c.wakeID
	}
	unsubscribe, err := w.l.Subscribe(channel, key, ch)
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
