package listen_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/internal/listen"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/internal/validate"
)

var unique atomic.Int64

// channelName is a channel no other test notifies; mixed case and a space,
// so that quoting is exercised.
func channelName() string {
	return fmt.Sprintf("Listen test %d", unique.Add(1))
}

// start runs l until the test ends (or the returned stop is called, which
// waits for Run to return).
func start(t *testing.T, l *listen.Listener) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func notify(t *testing.T, pool *pgxpool.Pool, channel, payload string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), "SELECT pg_notify($1, $2)", channel, payload); err != nil {
		t.Fatal(err)
	}
}

func subscribe(t *testing.T, l *listen.Listener, channel, payload string) (chan struct{}, func()) {
	t.Helper()
	ch := make(chan struct{}, 1)
	unsubscribe, err := l.Subscribe(channel, payload, ch)
	if err != nil {
		t.Fatal(err)
	}
	return ch, unsubscribe
}

// woken waits up to 5s for a wake-up on ch.
func woken(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("no wake-up: %s", what)
	}
}

// notWoken checks that ch holds no wake-up now.
func notWoken(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("unexpected wake-up: %s", what)
	default:
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 5s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Many subscribers, on every payload and on two payloads of their own, each
// on its own goroutine: each notification wakes exactly the subscribers it
// concerns, round after round, while other goroutines subscribe and
// unsubscribe meanwhile.
func TestFanOut(t *testing.T) {
	pool := pgtest.Pool(t)
	l := listen.New(pool, listen.Config{})
	channel := channelName()
	const perGroup, rounds = 30, 10
	type group struct {
		payload string
		chans   []chan struct{}
	}
	groups := []*group{{payload: ""}, {payload: "k1"}, {payload: "k2"}}
	for _, g := range groups {
		for range perGroup {
			ch, unsubscribe := subscribe(t, l, channel, g.payload)
			defer unsubscribe()
			g.chans = append(g.chans, ch)
		}
	}
	start(t, l)
	// The LISTEN wakes every subscriber once.
	for _, g := range groups {
		for _, ch := range g.chans {
			woken(t, ch, "the first LISTEN")
		}
	}

	churn, stopChurn := context.WithCancel(context.Background())
	var churners sync.WaitGroup
	for i := range 8 {
		churners.Go(func() {
			for churn.Err() == nil {
				ch := make(chan struct{}) // unbuffered, never read: sends must not block
				unsubscribe, err := l.Subscribe(channel, fmt.Sprintf("k%d", i%3), ch)
				if err != nil {
					t.Error(err)
					return
				}
				unsubscribe()
			}
		})
	}
	defer func() { stopChurn(); churners.Wait() }()

	for r := range rounds {
		payload := groups[1+r%2].payload // k1, k2, k1, ...
		var got sync.WaitGroup
		for _, g := range groups {
			if g.payload != "" && g.payload != payload {
				continue
			}
			for _, ch := range g.chans {
				got.Go(func() { woken(t, ch, "round "+payload) })
			}
		}
		notify(t, pool, channel, payload)
		got.Wait()
		// Everyone concerned has its wake-up, so every send for this
		// notification happened: the others got none.
		for _, g := range groups {
			if g.payload != "" && g.payload != payload {
				for _, ch := range g.chans {
					notWoken(t, ch, "a subscriber to "+g.payload+" on a notification of "+payload)
				}
			}
		}
	}
	if n := l.Listens(); n != 1 {
		t.Fatalf("%d LISTENs, want 1", n)
	}
	if want := int64(3*perGroup + rounds*2*perGroup); l.Wakeups() < want {
		t.Fatalf("%d wake-ups, want at least %d", l.Wakeups(), want)
	}
}

// A subscriber that never reads (its channel full, or unbuffered with no
// reader) holds up neither the connection nor the others.
func TestSlowSubscriber(t *testing.T) {
	pool := pgtest.Pool(t)
	l := listen.New(pool, listen.Config{})
	channel := channelName()
	full := make(chan struct{}, 1)
	full <- struct{}{}
	if _, err := l.Subscribe(channel, "", full); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Subscribe(channel, "", make(chan struct{})); err != nil {
		t.Fatal(err)
	}
	fast, unsubscribe := subscribe(t, l, channel, "")
	defer unsubscribe()
	start(t, l)
	woken(t, fast, "the first LISTEN")
	for i := range 20 {
		notify(t, pool, channel, fmt.Sprint(i))
		woken(t, fast, fmt.Sprintf("notification %d, with a slow subscriber", i))
	}
	if len(full) != 1 {
		t.Fatal("the slow subscriber's wake-up went missing")
	}
}

// Unsubscribing stops the wake-ups of that subscription only; unsubscribing
// twice is harmless, and a channel subscribed twice needs two unsubscribes.
func TestUnsubscribe(t *testing.T) {
	pool := pgtest.Pool(t)
	l := listen.New(pool, listen.Config{})
	channel := channelName()
	gone, unsubscribeGone := subscribe(t, l, channel, "")
	twice := make(chan struct{}, 1)
	var unsubscribeTwice [2]func()
	for i := range unsubscribeTwice {
		u, err := l.Subscribe(channel, "p", twice)
		if err != nil {
			t.Fatal(err)
		}
		unsubscribeTwice[i] = u
	}
	stays, unsubscribeStays := subscribe(t, l, channel, "")
	defer unsubscribeStays()
	start(t, l)
	for _, ch := range []chan struct{}{gone, twice, stays} {
		woken(t, ch, "the first LISTEN")
	}

	unsubscribeGone()
	unsubscribeGone()
	unsubscribeTwice[0]()
	unsubscribeTwice[0]() // once only: the second subscription stays
	notify(t, pool, channel, "p")
	woken(t, stays, "a subscriber still subscribed")
	woken(t, twice, "the second subscription of the same channel")
	notWoken(t, gone, "after unsubscribe")

	unsubscribeTwice[1]()
	notify(t, pool, channel, "p")
	woken(t, stays, "a subscriber still subscribed")
	notWoken(t, twice, "after both unsubscribes")
}

// Channels come and go: once the last subscriber of a channel leaves, the
// listener forgets it (the map does not grow with every channel ever
// used), and a new subscriber of the same channel is LISTENed and woken
// again.
func TestChannelsForgotten(t *testing.T) {
	pool := pgtest.Pool(t)
	l := listen.New(pool, listen.Config{})
	start(t, l)
	first := channelName()
	for range 3 {
		for range 50 {
			channel := channelName()
			_, ua := subscribe(t, l, channel, "")
			_, ub := subscribe(t, l, channel, "p")
			ua()
			ub()
		}
		if n := l.ChannelsForTest(); n != 0 {
			t.Fatalf("%d channels kept after every subscriber left, want 0", n)
		}
		again, u := subscribe(t, l, first, "")
		woken(t, again, "the LISTEN of a channel subscribed again")
		notify(t, pool, first, "x")
		woken(t, again, "a notification on a channel subscribed again")
		u()
	}
}

// A channel subscribed while the listener is connected is LISTENed at once
// (its subscriber is woken when it takes effect), on the same connection.
func TestSubscribeWhileListening(t *testing.T) {
	pool := pgtest.Pool(t)
	l := listen.New(pool, listen.Config{})
	first := channelName()
	a, ua := subscribe(t, l, first, "")
	defer ua()
	start(t, l)
	woken(t, a, "the first LISTEN")
	for i := range 5 {
		channel := channelName()
		b, ub := subscribe(t, l, channel, "")
		defer ub()
		woken(t, b, fmt.Sprintf("the LISTEN on channel %d, added while listening", i))
		notify(t, pool, channel, "x")
		woken(t, b, "a notification on the added channel")
		notWoken(t, a, "a notification on another channel")
	}
	notify(t, pool, first, "x")
	woken(t, a, "the first channel, after others were added")
	if n := l.Listens(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

func terminate(t *testing.T, pool *pgxpool.Pool, pid uint32) {
	t.Helper()
	var killed bool
	if err := pool.QueryRow(context.Background(), "SELECT pg_terminate_backend($1)", int32(pid)).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminating backend %d: %v, %v", pid, killed, err)
	}
}

// After the listening backend is killed, the listener reconnects (a new
// backend, one more Listen) and wakes every subscriber of every channel,
// with no notification sent: what was sent meanwhile went unheard. Then
// notifications arrive again.
func TestReconnectAfterKill(t *testing.T) {
	pool := pgtest.Pool(t)
	var failures atomic.Int64
	l := listen.New(pool, listen.Config{RetryMin: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond,
		OnError: func(err error, retryIn time.Duration) {
			if err == nil || retryIn <= 0 || retryIn > 20*time.Millisecond {
				t.Errorf("OnError(%v, %v)", err, retryIn)
			}
			failures.Add(1)
		}})
	var chans []chan struct{}
	for i := range 10 {
		ch, unsubscribe := subscribe(t, l, fmt.Sprintf("reconnect %d", i%2), "")
		defer unsubscribe()
		chans = append(chans, ch)
	}
	start(t, l)
	for round := range 3 {
		for _, ch := range chans {
			woken(t, ch, "the LISTEN")
		}
		waitUntil(t, "the listener did not report its pid", func() bool { return l.PID() != 0 })
		old := l.PID()
		terminate(t, pool, old)
		waitUntil(t, "no reconnection", func() bool { p := l.PID(); return p != 0 && p != old })
		if n := l.Listens(); n != int64(round+2) {
			t.Fatalf("%d connections after %d kills", n, round+1)
		}
		// The reconnection woke every subscriber (checked at the top of
		// the next round, and here for the last).
	}
	for _, ch := range chans {
		woken(t, ch, "the reconnection")
	}
	notify(t, pool, "reconnect 1", "")
	for i, ch := range chans {
		if i%2 == 1 {
			woken(t, ch, "a notification after the reconnections")
		}
	}
	if failures.Load() != 3 {
		t.Fatalf("OnError called %d times for 3 kills", failures.Load())
	}
}

// With a short ping interval the listener checks its connection often,
// stays on it, wakes nobody for it, and still hears notifications.
func TestPing(t *testing.T) {
	pool := pgtest.Pool(t)
	l := listen.New(pool, listen.Config{Ping: 5 * time.Millisecond})
	channel := channelName()
	ch, unsubscribe := subscribe(t, l, channel, "")
	defer unsubscribe()
	start(t, l)
	woken(t, ch, "the first LISTEN")
	pid := l.PID()
	time.Sleep(100 * time.Millisecond) // twenty pings
	notWoken(t, ch, "a ping")
	// The check repeats LISTEN: the backend's query still shows it.
	var q string
	if err := pool.QueryRow(context.Background(), "SELECT query FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&q); err != nil || q != `LISTEN "`+channel+`"` {
		t.Fatalf("the listening backend's query is %q (%v)", q, err)
	}
	notify(t, pool, channel, "x")
	woken(t, ch, "a notification between pings")
	if n := l.Listens(); n != 1 || l.PID() != pid {
		t.Fatalf("%d connections, pid %d then %d: the pings broke the connection", n, pid, l.PID())
	}
}

// Ending Run's context closes the connection (its backend goes) and ends
// every goroutine, whether connected or waiting to reconnect; pgtest.Main
// fails the package on a leaked goroutine. A second Run at once is refused.
func TestRunStops(t *testing.T) {
	pool := pgtest.Pool(t)
	for _, reconnecting := range []bool{false, true} {
		l := listen.New(pool, listen.Config{RetryMin: time.Hour, RetryMax: time.Hour})
		ch, unsubscribe := subscribe(t, l, channelName(), "")
		defer unsubscribe()
		stop := start(t, l)
		woken(t, ch, "the first LISTEN")
		pid := l.PID()
		if err := l.Run(context.Background()); !errors.Is(err, listen.ErrRunning) {
			t.Fatalf("a second Run: %v", err)
		}
		if reconnecting {
			terminate(t, pool, pid)
			waitUntil(t, "the listener did not notice its backend's end", func() bool { return l.PID() == 0 })
		}
		t0 := time.Now()
		stop()
		if d := time.Since(t0); d > 2*time.Second {
			t.Fatalf("Run took %v to return", d)
		}
		if l.PID() != 0 {
			t.Fatal("still listening after Run returned")
		}
		waitUntil(t, "the listener's backend outlived Run", func() bool {
			var n int
			err := pool.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&n)
			return err == nil && n == 0
		})
	}
}

func TestSubscribeBadInput(t *testing.T) {
	l := listen.New(pgtest.Pool(t), listen.Config{})
	for name, c := range map[string]struct {
		channel string
		ch      chan struct{}
	}{
		"empty channel":    {"", make(chan struct{}, 1)},
		"NUL":              {"a\x00b", make(chan struct{}, 1)},
		"quote":            {`a"b`, make(chan struct{}, 1)},
		"too long":         {string(make([]byte, 64)), make(chan struct{}, 1)},
		"nil wake channel": {"ok", nil},
	} {
		if _, err := l.Subscribe(c.channel, "", c.ch); !errors.Is(err, validate.ErrInvalidInput) {
			t.Errorf("%s: %v, want ErrInvalidInput", name, err)
		}
	}
}

// A kept channel is LISTENed with no subscriber, and stays: a subscriber
// that comes after the LISTEN took effect is not woken by it (nothing was
// missed) but by notifications, and after every subscriber left the channel
// is still LISTENed for the next one.
func TestKeep(t *testing.T) {
	pool := pgtest.Pool(t)
	l := listen.New(pool, listen.Config{})
	kept := channelName()
	if err := l.Keep(kept); err != nil {
		t.Fatal(err)
	}
	start(t, l)
	waitUntil(t, "the kept channel LISTENed", func() bool { return l.Listens() == 1 })
	for i := range 3 {
		a, ua := subscribe(t, l, kept, "p")
		select { // a LISTEN would wake it within milliseconds
		case <-a:
			t.Fatalf("subscriber %d woken by a LISTEN of a kept channel", i)
		case <-time.After(200 * time.Millisecond):
		}
		notify(t, pool, kept, "p")
		woken(t, a, fmt.Sprintf("subscriber %d, by a notification", i))
		ua()
		if n := l.ChannelsForTest(); n != 1 {
			t.Fatalf("%d channels after the subscriber left, want the kept one", n)
		}
	}
	if err := l.Keep("no such; channel"); err == nil {
		t.Fatal("Keep accepted a channel name that is not an identifier")
	}
}
