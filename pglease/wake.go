package pglease

import (
	"context"
	"errors"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// wakeChannel is the channel on which Release and ReleaseByOwnerToken send
// NOTIFY with the released key as payload (queries/leases.sql).
const wakeChannel = "pgfence_lease_released"

const (
	// The listener reconnects after a failure with jittered exponential
	// backoff between these bounds; waiters poll meanwhile.
	listenRetryMin = 50 * time.Millisecond
	listenRetryMax = 5 * time.Second
	// listenPing is how long the listener waits for a notification before
	// it checks that its connection is still alive: a half-open TCP
	// connection would otherwise keep it deaf until the kernel notices.
	// (Waiters poll meanwhile, so a deaf listener only slows them.)
	listenPing = 30 * time.Second
)

// waker keeps one listening connection for a client made with
// WithWakeOnRelease and fans each release notification out to the Acquire
// calls waiting for that key. It only shortens waits: every waiter keeps its
// backoff timer, so a lost notification (listener down, lease expired by its
// TTL, which sends none) costs at most one backoff sleep.
type waker struct {
	c    *Client
	ctx  context.Context // ends on Client.Close
	stop context.CancelFunc

	retryMin, retryMax time.Duration
	ping               time.Duration // listenPing; tests shorten it

	mu      sync.Mutex
	started bool
	waiters map[string]map[chan struct{}]struct{}
	pid     uint32 // backend of the listening connection; 0 while not listening
	listens int64  // successful LISTENs: the first plus each reconnection

	wakeups atomic.Int64 // notifications handed to a waiter
}

func newWaker(c *Client) *waker {
	ctx, stop := context.WithCancel(context.Background())
	return &waker{
		c: c, ctx: ctx, stop: stop,
		retryMin: listenRetryMin, retryMax: listenRetryMax, ping: listenPing,
		waiters: map[string]map[chan struct{}]struct{}{},
	}
}

// subscribe registers a waiter for key. The channel (buffer 1) receives when
// key is released, or when the listener (re)connects and may have missed a
// release. Subscribing before the first attempt closes the window between a
// failed attempt and the subscription.
func (w *waker) subscribe(key string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	set := w.waiters[key]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		w.waiters[key] = set
	}
	set[ch] = struct{}{}
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		delete(set, ch)
		if len(set) == 0 { // set is still the key's: it held ch until now
			delete(w.waiters, key)
		}
		w.mu.Unlock()
	}
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
	go w.run()
}

func (w *waker) run() {
	defer w.c.wg.Done()
	delay := w.retryMin
	for {
		listened, err := w.listen()
		if w.ctx.Err() != nil {
			return
		}
		if listened {
			delay = w.retryMin
		}
		sleep := delay/2 + time.Duration(mrand.Int64N(int64(delay/2)+1))
		delay = min(2*delay, w.retryMax)
		w.c.cfg.logger.Warn("pglease: wake-on-release listener failed; waiters poll until it reconnects",
			"err", err, "retry_in", sleep)
		t := time.NewTimer(sleep)
		select {
		case <-w.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// listen takes one connection from the pool for good (Hijack), LISTENs, and
// hands notifications out until the connection fails or the client closes.
// listened reports whether LISTEN succeeded.
func (w *waker) listen() (listened bool, err error) {
	pc, err := w.c.pool.Acquire(w.ctx)
	if err != nil {
		return false, err
	}
	conn := pc.Hijack()
	defer func() {
		w.mu.Lock()
		w.pid = 0
		w.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn.Close(ctx)
		cancel()
	}()
	// The simple protocol, whatever the pool's exec mode.
	if _, err := conn.PgConn().Exec(w.ctx, "LISTEN "+wakeChannel).ReadAll(); err != nil {
		return false, err
	}
	w.mu.Lock()
	w.pid = conn.PgConn().PID()
	w.listens++
	w.mu.Unlock()
	// Releases while nobody listened went unheard: let every waiter retry.
	w.wakeAll()
	for {
		ctx, cancel := context.WithTimeout(w.ctx, w.ping)
		n, err := conn.WaitForNotification(ctx)
		cancel()
		switch {
		case err == nil:
			if n.Channel == wakeChannel {
				w.deliver(n.Payload)
			}
			continue
		case w.ctx.Err() != nil:
			return true, w.ctx.Err()
		case errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed():
			// The liveness check repeats LISTEN (a no-op) rather than a
			// ping, so that pg_stat_activity keeps showing the backend's
			// query as LISTEN pgfence_lease_released.
			pctx, pcancel := context.WithTimeout(w.ctx, 5*time.Second)
			_, err = conn.PgConn().Exec(pctx, "LISTEN "+wakeChannel).ReadAll()
			pcancel()
			if err == nil {
				continue
			}
		}
		return true, err
	}
}

func (w *waker) deliver(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.waiters[key] {
		w.signal(ch)
	}
}

func (w *waker) wakeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, set := range w.waiters {
		for ch := range set {
			w.signal(ch)
		}
	}
}

// signal never blocks: a waiter with a wake-up pending needs no second one.
func (w *waker) signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
		w.wakeups.Add(1)
	default:
	}
}
