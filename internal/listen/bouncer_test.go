package listen_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgfence/pgfence/internal/listen"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// noneListening fails the test if a server session of the package's
// bouncer LISTENs on anything.
func noneListening(t *testing.T) {
	t.Helper()
	for pid, channels := range pgtest.BouncerListening(t) {
		if len(channels) > 0 {
			t.Errorf("the bouncer's server session %d LISTENs on %q", pid, channels)
		}
	}
}

// The check the tests behind the bouncer rely on finds a LISTEN sent through
// it; PgBouncer's RECONNECT then replaces the session that kept it.
func TestBouncerListeningSeesAStrayListen(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.BouncerPool(t)
	channel := channelName()
	if _, err := pool.Exec(ctx, `LISTEN "`+channel+`"`); err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, channels := range pgtest.BouncerListening(t) {
		if slices.Contains(channels, channel) {
			found++
		}
	}
	if found != 1 {
		t.Fatalf("%d server sessions LISTEN on %q; want the one the LISTEN ran on", found, channel)
	}
	pool.Reset()
	if _, err := pgtest.BouncerAdmin(t).Exec(ctx, "RECONNECT"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		stray := 0
		for _, channels := range pgtest.BouncerListening(t) {
			stray += len(channels)
		}
		if stray == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after RECONNECT, %d channels still LISTENed on the bouncer's server sessions", stray)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Behind PgBouncer in transaction mode the listener sends no LISTEN: it says
// so once (OnPooled) and Run returns; its subscribers are never woken, and
// no server session listens.
func TestListenerBehindTransactionPooler(t *testing.T) {
	pool := pgtest.BouncerPool(t)
	var pooled atomic.Int32
	l := listen.New(pool, listen.Config{OnPooled: func() { pooled.Add(1) }})
	channel := channelName()
	ch, unsubscribe := subscribe(t, l, channel, "")
	defer unsubscribe()
	for range 2 { // a second Run finds it known
		done := make(chan error, 1)
		go func() { done <- l.Run(context.Background()) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run behind a transaction pooler did not return")
		}
	}
	if n := pooled.Load(); n != 1 || !l.Pooled() {
		t.Fatalf("OnPooled called %d times, Pooled %v; want once, true", n, l.Pooled())
	}
	if l.PID() != 0 || l.Listens() != 0 {
		t.Fatalf("PID %d, Listens %d: want 0, 0", l.PID(), l.Listens())
	}
	notify(t, pool, channel, "")
	time.Sleep(100 * time.Millisecond)
	notWoken(t, ch, "a notification behind a transaction pooler")
	noneListening(t)
}

// Through a session pooler the listener listens: each client connection
// keeps its server session.
func TestListenerBehindSessionPooler(t *testing.T) {
	pool := pgtest.SessionBouncerPool(t)
	var pooled atomic.Int32
	l := listen.New(pool, listen.Config{OnPooled: func() { pooled.Add(1) }})
	channel := channelName()
	ch, unsubscribe := subscribe(t, l, channel, "")
	defer unsubscribe()
	start(t, l)
	woken(t, ch, "the first LISTEN")
	notify(t, pool, channel, "")
	woken(t, ch, "a notification through a session pooler")
	if pooled.Load() != 0 || l.Pooled() {
		t.Fatal("a session pooler was taken for a transaction pooler")
	}
}
