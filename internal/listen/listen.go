package listen

import (
	"context"
	"errors"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/internal/pgdb"
	"github.com/pgfence/pgfence/internal/validate"
)

// Defaults of Config.
const (
	DefaultRetryMin = 50 * time.Millisecond
	DefaultRetryMax = 5 * time.Second
	DefaultPing     = 30 * time.Second
)

// statementTimeout bounds each LISTEN the listener sends.
const statementTimeout = 5 * time.Second

// Config tunes a Listener. Zero fields take the defaults.
type Config struct {
	// RetryMin and RetryMax bound the jittered exponential backoff between
	// reconnection attempts.
	RetryMin, RetryMax time.Duration
	// Ping is how long a wait for a notification lasts before the listener
	// checks its connection by repeating LISTEN.
	Ping time.Duration
	// OnError, if set, is told each failure of the connection and when the
	// next attempt comes; the users log it in words of their own.
	OnError func(err error, retryIn time.Duration)
	// OnPooled, if set, is called once, from Run, when the listener finds
	// a transaction or statement pooler between its pool and PostgreSQL
	// (see the package doc); the users log and count it.
	OnPooled func()
}

// Listener owns one LISTEN connection; see the package doc. Subscribe is
// safe for concurrent use, before and while Run runs.
type Listener struct {
	pool     *pgxpool.Pool
	onError  func(error, time.Duration)
	onPooled func()
	running  atomic.Bool
	checked  bool        // the pool's pooling is known (Run's goroutine only)
	pooled   atomic.Bool // behind a transaction pooler: never LISTENs

	mu        sync.Mutex
	retryMin  time.Duration
	retryMax  time.Duration
	ping      time.Duration
	channels  map[string]*channelSubs
	interrupt context.CancelFunc // ends the current wait; nil while not waiting
	pid       uint32             // backend of the connection; 0 while not listening
	listens   int64              // connections whose LISTEN succeeded

	wakeups atomic.Int64
}

// channelSubs are one channel's subscribers, keyed by the payload they asked
// for ("" for every payload).
type channelSubs struct {
	listened bool // LISTEN took effect on the current connection
	kept     bool // Keep: stays in the map, and LISTENed, with no subscriber
	subs     map[string]map[chan<- struct{}]int
}

// New returns a listener that takes its connection from pool. It does
// nothing until Run.
func New(pool *pgxpool.Pool, cfg Config) *Listener {
	l := &Listener{pool: pool, onError: cfg.OnError, onPooled: cfg.OnPooled, channels: map[string]*channelSubs{}}
	l.SetRetry(cfg.RetryMin, cfg.RetryMax)
	l.SetPing(cfg.Ping)
	return l
}

// SetRetry sets the reconnection backoff bounds (zero: the default); it
// applies from the next failure on.
func (l *Listener) SetRetry(lo, hi time.Duration) {
	if lo <= 0 {
		lo = DefaultRetryMin
	}
	if hi <= 0 {
		hi = DefaultRetryMax
	}
	l.mu.Lock()
	l.retryMin, l.retryMax = lo, max(lo, hi)
	l.mu.Unlock()
}

// SetPing sets the ping interval (zero: the default); it applies from the
// next wait on.
func (l *Listener) SetPing(d time.Duration) {
	if d <= 0 {
		d = DefaultPing
	}
	l.mu.Lock()
	l.ping = d
	l.mu.Unlock()
}

// Subscribe makes wake receive a wake-up (a non-blocking send; give it a
// buffer of 1) on each notification on channel whose payload is payload, or
// any payload when payload is "", and whenever a LISTEN on channel takes
// effect (see the package doc). A channel not yet LISTENed is LISTENed at
// once if Run is connected, else on connection. unsubscribe stops the
// wake-ups; it may be called more than once.
func (l *Listener) Subscribe(channel, payload string, wake chan<- struct{}) (unsubscribe func(), err error) {
	if err := validate.Identifier("notification channel", channel); err != nil {
		return nil, validate.Invalid("listen", "%v", err)
	}
	if wake == nil {
		return nil, validate.Invalid("listen", "nil wake-up channel")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	cs := l.channelLocked(channel)
	set := cs.subs[payload]
	if set == nil {
		set = map[chan<- struct{}]int{}
		cs.subs[payload] = set
	}
	set[wake]++ // a count: the same channel may be subscribed twice
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if set[wake]--; set[wake] == 0 {
				delete(set, wake)
			}
			if len(set) == 0 { // set is still the payload's: it held wake until now
				delete(cs.subs, payload)
			}
			// A channel nobody subscribes to any more is forgotten, so
			// that channels come and go without the map growing. Its
			// LISTEN stays in effect on this connection (notifications
			// on it are dropped in deliver) and is not repeated on the
			// next; a new Subscribe LISTENs it again.
			if len(cs.subs) == 0 && !cs.kept && l.channels[channel] == cs {
				delete(l.channels, channel)
			}
		})
	}, nil
}

// Keep LISTENs on channel from now on, on every connection, whether or not
// anyone subscribes to it: for a channel that subscribers come and go on,
// so that each new one neither waits for a LISTEN nor takes the wake-up a
// LISTEN taking effect gives.
func (l *Listener) Keep(channel string) error {
	if err := validate.Identifier("notification channel", channel); err != nil {
		return validate.Invalid("listen", "%v", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.channelLocked(channel).kept = true
	return nil
}

// channelLocked returns channel's subscribers, adding the channel if it is
// new; a channel not yet LISTENed interrupts the run loop's wait, which
// LISTENs it before it waits again. l.mu is held.
func (l *Listener) channelLocked(channel string) *channelSubs {
	cs := l.channels[channel]
	if cs == nil {
		cs = &channelSubs{subs: map[string]map[chan<- struct{}]int{}}
		l.channels[channel] = cs
	}
	if !cs.listened && l.interrupt != nil {
		l.interrupt()
	}
	return cs
}

// PID is the backend pid of the listening connection, 0 while not listening.
func (l *Listener) PID() uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pid
}

// Listens counts the connections whose LISTEN succeeded: the first one
// plus each reconnection.
func (l *Listener) Listens() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.listens
}

// Wakeups counts the wake-ups handed to subscribers (sends to a full
// channel, which coalesce, do not count).
func (l *Listener) Wakeups() int64 { return l.wakeups.Load() }

// Pooled reports whether Run found a transaction or statement pooler in
// front of PostgreSQL, and so never LISTENs.
func (l *Listener) Pooled() bool { return l.pooled.Load() }

// ErrRunning is returned by Run while another Run of the listener runs.
var ErrRunning = errors.New("listen: the listener is already running")

// errPooled ends the first session behind a transaction pooler.
var errPooled = errors.New("listen: a transaction pooler is in front of PostgreSQL")

// Run keeps the listening connection until ctx ends, reconnecting after
// each failure, then closes it and returns nil. Waiting subscribers get
// nothing while it is down: they poll. Behind a transaction or statement
// pooler it sends no LISTEN: it calls OnPooled and returns nil at once.
func (l *Listener) Run(ctx context.Context) error {
	if !l.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer l.running.Store(false)
	var delay time.Duration
	for !l.pooled.Load() {
		listened, err := l.session(ctx)
		if errors.Is(err, errPooled) {
			l.pooled.Store(true)
			if l.onPooled != nil {
				l.onPooled()
			}
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		l.mu.Lock()
		if listened || delay == 0 {
			delay = l.retryMin
		}
		retryMax := l.retryMax
		l.mu.Unlock()
		sleep := delay/2 + time.Duration(mrand.Int64N(int64(delay/2)+1))
		delay = min(2*delay, retryMax)
		if l.onError != nil {
			l.onError(err, sleep)
		}
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
	return nil
}

// session takes a connection from the pool for good (Hijack), LISTENs, and
// hands notifications out until the connection fails or ctx ends.
// listened reports whether the first LISTEN succeeded. The first
// connection that works is checked for a pooler first: errPooled, with no
// LISTEN sent, for a transaction pooler.
func (l *Listener) session(ctx context.Context) (listened bool, err error) {
	pc, err := l.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	conn := pc.Hijack()
	defer l.hangUp(conn)
	if !l.checked {
		cctx, cancel := context.WithTimeout(ctx, statementTimeout)
		pooling, err := pgdb.DetectPooling(cctx, conn, l.pool)
		cancel()
		if err != nil {
			return false, err
		}
		l.checked = true
		if pooling == pgdb.PoolingTransaction {
			return false, errPooled
		}
	}
	channels := l.channelNames(false)
	if err := l.listen(ctx, conn, channels, false); err != nil {
		return false, err
	}
	l.mu.Lock()
	l.pid = conn.PgConn().PID()
	l.listens++
	l.wakeLocked(channels) // after the counters: a woken subscriber sees them
	l.mu.Unlock()
	for {
		wctx, cancel, pending := l.waitContext(ctx)
		if pending != nil {
			cancel()
			if err := l.listen(ctx, conn, pending, true); err != nil {
				return true, err
			}
			continue
		}
		n, err := conn.WaitForNotification(wctx)
		l.mu.Lock()
		l.interrupt = nil
		l.mu.Unlock()
		cancel()
		switch {
		case err == nil:
			l.deliver(n.Channel, n.Payload)
			continue
		case ctx.Err() != nil:
			return true, ctx.Err()
		case wctx.Err() != nil && !conn.IsClosed():
			if !errors.Is(wctx.Err(), context.DeadlineExceeded) {
				continue // interrupted: a channel to LISTEN
			}
			// A quiet ping interval: check the connection.
			if err = l.listen(ctx, conn, l.channelNames(true), false); err == nil {
				continue
			}
		}
		return true, err
	}
}

// waitContext returns the context of the next wait for a notification,
// which the ping interval bounds and Subscribe can interrupt; or, when
// channels were subscribed and not LISTENed yet, their names.
func (l *Listener) waitContext(ctx context.Context) (context.Context, context.CancelFunc, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, l.ping)
	var pending []string
	for name, cs := range l.channels {
		if !cs.listened {
			pending = append(pending, name)
		}
	}
	if pending == nil {
		l.interrupt = cancel
	}
	return wctx, cancel, pending
}

// channelNames lists the channels subscribed so far (only those LISTENed
// on this connection when listened).
func (l *Listener) channelNames(listened bool) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	names := make([]string, 0, len(l.channels))
	for name, cs := range l.channels {
		if !listened || cs.listened {
			names = append(names, name)
		}
	}
	return names
}

// listen LISTENs on channels in one simple-protocol round trip (whatever the
// pool's exec mode), then, with wake, wakes their subscribers: a
// notification sent before it took effect went unheard. (The ping repeats
// a LISTEN in effect: no wake-up; a new connection wakes once its counters
// are set.) With no channel it pings.
func (l *Listener) listen(ctx context.Context, conn *pgx.Conn, channels []string, wake bool) error {
	ctx, cancel := context.WithTimeout(ctx, statementTimeout)
	defer cancel()
	if len(channels) == 0 {
		return conn.Ping(ctx)
	}
	stmts := make([]string, len(channels))
	for i, name := range channels {
		stmts[i] = "LISTEN " + quote(name)
	}
	if _, err := conn.PgConn().Exec(ctx, strings.Join(stmts, "; ")).ReadAll(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, name := range channels {
		if cs := l.channels[name]; cs != nil { // nil: unsubscribed meanwhile
			cs.listened = true
		}
	}
	if wake {
		l.wakeLocked(channels)
	}
	return nil
}

// wakeLocked wakes every subscriber of channels.
func (l *Listener) wakeLocked(channels []string) {
	for _, name := range channels {
		if cs := l.channels[name]; cs != nil {
			for _, set := range cs.subs {
				l.signalAll(set)
			}
		}
	}
}

// hangUp closes the connection and marks every channel unlistened.
func (l *Listener) hangUp(conn *pgx.Conn) {
	l.mu.Lock()
	l.pid = 0
	for _, cs := range l.channels {
		cs.listened = false
	}
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn.Close(ctx)
}

// deliver wakes the subscribers of channel that asked for payload or for
// every payload.
func (l *Listener) deliver(channel, payload string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cs := l.channels[channel]
	if cs == nil {
		return
	}
	l.signalAll(cs.subs[""])
	if payload != "" {
		l.signalAll(cs.subs[payload])
	}
}

// signalAll never blocks: a subscriber with a wake-up pending needs no
// second one.
func (l *Listener) signalAll(set map[chan<- struct{}]int) {
	for ch := range set {
		select {
		case ch <- struct{}{}:
			l.wakeups.Add(1)
		default:
		}
	}
}

// quote quotes every name, so that a keyword or a capital letter is taken
// as written.
func quote(name string) string { return pgx.Identifier{name}.Sanitize() }
