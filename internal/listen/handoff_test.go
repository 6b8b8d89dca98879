package listen_test

import (
	"context"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// The end-to-end tests of pglease's and claim's listeners: directly, and
// behind PgBouncer in transaction mode with a listen pool of their own and
// without.

// column is one way of reaching PostgreSQL: the clients' pool and, for
// clients that listen, the listen pool given to WithWakeOnRelease and WithListen (nil: none).
type column struct {
	name       string
	pool       *pgxpool.Pool
	listenPool *pgxpool.Pool
}

func directColumn(t *testing.T) column { return column{"direct", pgtest.Pool(t), nil} }

func bouncerColumn(t *testing.T) column { return column{"PgBouncer", pgtest.BouncerPool(t), nil} }

func listenPoolColumn(t *testing.T) column {
	return column{"PgBouncer + listen pool", pgtest.BouncerPool(t), pgtest.Pool(t, func(c *pgxpool.Config) { c.MaxConns = 1 })}
}

// leaseMode is a row of the hand-off comparison: how the waiters wait.
type leaseMode struct {
	name       string
	wake, fair bool
}

var (
	modeBackoff = leaseMode{"default backoff", false, false}
	modeWake    = leaseMode{"WithWakeOnRelease", true, false}
	modeFair    = leaseMode{"WithFairWaiting", false, true}
	modeBoth    = leaseMode{"WithFairWaiting + WithWakeOnRelease", true, true}
)

// warnings counts the log records whose message contains "pooler".
type warnings struct {
	slog.Handler
	n *atomic.Int32
}

func newWarnings() warnings {
	return warnings{slog.DiscardHandler, new(atomic.Int32)}
}

func (w warnings) Enabled(context.Context, slog.Level) bool { return true }

func (w warnings) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn && strings.Contains(r.Message, "pooler") {
		w.n.Add(1)
	}
	return nil
}

func (w warnings) logger() *slog.Logger { return slog.New(w) }

// pair is a holder and a waiter, two clients of one column and mode.
type pair struct{ holder, waiter *pglease.Client }

func newPair(t *testing.T, col column, mode leaseMode, log *slog.Logger) pair {
	t.Helper()
	opts := []pglease.Option{pglease.WithoutAutoRenew()}
	if log != nil {
		opts = append(opts, pglease.WithLogger(log))
	}
	if mode.wake {
		if col.listenPool != nil {
			opts = append(opts, pglease.WithWakeOnRelease(col.listenPool))
		} else {
			opts = append(opts, pglease.WithWakeOnRelease())
		}
	}
	if mode.fair {
		opts = append(opts, pglease.WithFairWaiting())
	}
	var p pair
	for _, c := range []**pglease.Client{&p.holder, &p.waiter} {
		var err error
		if *c, err = pglease.New(col.pool, opts...); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { (*c).Close() })
	}
	return p
}

// handoff takes key with the holder, starts the waiter's Acquire, releases
// after hold, and returns the time from Release returning to Acquire
// returning.
func (p pair) handoff(t *testing.T, key string, hold time.Duration) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := p.holder.TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		l  *pglease.Lease
		at time.Time
	}
	done := make(chan got, 1)
	errs := make(chan error, 1)
	go func() {
		wl, err := p.waiter.Acquire(ctx, key, time.Minute)
		if err != nil {
			errs <- err
			return
		}
		done <- got{wl, time.Now()}
	}()
	time.Sleep(hold)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	select {
	case g := <-done:
		if err := g.l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		return g.at.Sub(released)
	case err := <-errs:
		t.Fatal(err)
	}
	return 0
}

// hold is how long a holder keeps the key before it releases: long enough
// for the waiter to be asleep, and varied, so that polling waiters are
// caught at every point of their backoff.
func hold() time.Duration { return 100*time.Millisecond + mrand.N(200*time.Millisecond) }

// runner is a claim.Runner of one column on a queue of its own that reports
// when each handler starts.
type runner struct {
	pool           *pgxpool.Pool
	claimer        *claim.Claimer
	queue, channel string
	started        chan time.Time
}

var runnerSeq atomic.Int64

func startRunner(t *testing.T, col column, listen bool, poll time.Duration, log *slog.Logger) *runner {
	t.Helper()
	n := runnerSeq.Add(1)
	r := &runner{pool: col.pool, queue: fmt.Sprintf("listen-%d", n), started: make(chan time.Time, 1)}
	copts := []claim.Option{claim.WithQueue(r.queue)}
	if log != nil {
		copts = append(copts, claim.WithLogger(log))
	}
	c, err := claim.New(context.Background(), col.pool, copts...)
	if err != nil {
		t.Fatal(err)
	}
	r.claimer = c
	opts := []claim.Option{claim.WithWorkers(1), claim.WithPollInterval(poll), claim.WithRescueInterval(-1)}
	if listen {
		r.channel = fmt.Sprintf("pgfence_listen_test_%d", n)
		if col.listenPool != nil {
			opts = append(opts, claim.WithListen(r.channel, col.listenPool))
		} else {
			opts = append(opts, claim.WithListen(r.channel))
		}
	}
	rn, err := claim.NewRunner(c, func(context.Context, *claim.Job) error {
		r.started <- time.Now()
		return nil
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rn.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return r
}

// pickup enqueues a job after gap and returns the time from Enqueue
// returning to its handler starting.
func (r *runner) pickup(t *testing.T, gap time.Duration) time.Duration {
	t.Helper()
	time.Sleep(gap)
	if _, err := r.claimer.Enqueue(context.Background(), r.pool, claim.NewJob{Notify: r.channel}); err != nil {
		t.Fatal(err)
	}
	enqueued := time.Now()
	select {
	case at := <-r.started:
		return at.Sub(enqueued)
	case <-time.After(time.Minute):
		t.Fatal("no job started within a minute")
	}
	return 0
}

// gap is how long before a job is enqueued: the runner has found the queue
// empty and rests.
func gap() time.Duration { return 50*time.Millisecond + mrand.N(100*time.Millisecond) }

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// interleaved runs measure n times for each of m cases in turn, after one
// round not counted (it starts the listeners), and returns the times by
// case.
func interleaved(n, m int, measure func(i int) time.Duration) [][]time.Duration {
	for i := range m {
		measure(i)
	}
	out := make([][]time.Duration, m)
	for range n {
		for i := range m {
			out[i] = append(out[i], measure(i))
		}
	}
	return out
}

// within fails the test unless got's median is at most ratio times base's
// plus slack (a millisecond or two of PgBouncer's hop, and the noise of a
// shared machine), and logs both.
func within(t *testing.T, what string, got, base []time.Duration, ratio float64, slack time.Duration) {
	t.Helper()
	g, b := median(got), median(base)
	t.Logf("%s: median %v against %v (p90 %v, %v)", what, g.Round(10*time.Microsecond), b.Round(10*time.Microsecond),
		percentile(got, 90).Round(10*time.Microsecond), percentile(base, 90).Round(10*time.Microsecond))
	if float64(g) > ratio*float64(b)+float64(slack) {
		t.Errorf("%s: median %v, more than %.1f times %v + %v", what, g, ratio, b, slack)
	}
}

const handoffs = 20

// With a listen pool on a direct pool, waiters and runners behind PgBouncer
// are woken about as fast as with every connection direct, and no server
// session of the bouncer listens. The medians of 20 hand-offs each,
// interleaved, are within 2x on an idle machine; the test allows 3x and 3 ms
// more, for a shared one.
func TestBehindBouncerWithListenPool(t *testing.T) {
	direct, viaBouncer := directColumn(t), listenPoolColumn(t)
	for _, mode := range []leaseMode{modeWake, modeBoth} {
		t.Run(mode.name, func(t *testing.T) {
			pairs := []pair{newPair(t, direct, mode, nil), newPair(t, viaBouncer, mode, nil)}
			key := fmt.Sprintf("%s/%d", t.Name(), mrand.Int64())
			got := interleaved(handoffs, 2, func(i int) time.Duration { return pairs[i].handoff(t, key, hold()) })
			within(t, "hand-off behind PgBouncer with a listen pool vs direct", got[1], got[0], 3, 3*time.Millisecond)
		})
	}
	t.Run("claim", func(t *testing.T) {
		runners := []*runner{startRunner(t, direct, true, 5*time.Second, nil), startRunner(t, viaBouncer, true, 5*time.Second, nil)}
		got := interleaved(handoffs, 2, func(i int) time.Duration { return runners[i].pickup(t, gap()) })
		within(t, "job pickup behind PgBouncer with a listen pool vs direct", got[1], got[0], 3, 3*time.Millisecond)
		noneListening(t)
	})
	noneListening(t)
}

// Without a listen pool, behind PgBouncer in transaction mode: no server
// session ever listens, each client and runner warns once, and waiters
// are as fast as those that only poll (fair waiters keep their short poll).
func TestBehindBouncerWithoutListenPool(t *testing.T) {
	col := bouncerColumn(t)
	// The slack is a fraction of the polling's spread: the backoff's
	// sleeps reach 20 ms to 1 s, fair waiting's short poll 10 to 30 ms.
	for _, c := range []struct {
		mode, polling leaseMode
		slack         time.Duration
	}{{modeWake, modeBackoff, 50 * time.Millisecond}, {modeBoth, modeFair, 5 * time.Millisecond}} {
		t.Run(c.mode.name, func(t *testing.T) {
			w := newWarnings()
			pairs := []pair{newPair(t, col, c.polling, nil), newPair(t, col, c.mode, w.logger())}
			key := fmt.Sprintf("%s/%d", t.Name(), mrand.Int64())
			got := interleaved(handoffs, 2, func(i int) time.Duration { return pairs[i].handoff(t, key, hold()) })
			within(t, "hand-off with "+c.mode.name+" vs "+c.polling.name, got[1], got[0], 1.5, c.slack)
			noneListening(t)
			// The waiter warned once, when its listener would have started
			// on its first wait; the holder never waited.
			if n := w.n.Load(); n != 1 {
				t.Errorf("%d warnings about the pooler; want one, from the waiter", n)
			}
		})
	}
	t.Run("claim", func(t *testing.T) {
		w := newWarnings()
		const poll = 300 * time.Millisecond
		runners := []*runner{startRunner(t, col, false, poll, nil), startRunner(t, col, true, poll, w.logger())}
		// At a random point of the poll interval: with a short gap, each
		// runner's phase would follow the other's pickup time.
		got := interleaved(handoffs, 2, func(i int) time.Duration { return runners[i].pickup(t, gap()+mrand.N(poll)) })
		// Uniform over the poll interval, the medians of 20 still differ by
		// a fifth of it either way.
		within(t, "job pickup with WithListen vs polling only", got[1], got[0], 1.5, poll/4)
		noneListening(t)
		if n := w.n.Load(); n != 1 {
			t.Errorf("%d warnings about the pooler from one runner; want one", n)
		}
	})
	noneListening(t)
}

// tableVariable names the environment variable that turns TestWakeTable on:
// the number of hand-offs per cell.
const tableVariable = "PGFENCE_WAKE_TABLE"

// TestWakeTable measures the hand-off of each way of waiting, and a claim
// Runner's pickup, directly, behind PgBouncer with a listen pool and
// behind PgBouncer without, the cells of a row interleaved, and logs them
// as a Markdown table. It runs only when PGFENCE_WAKE_TABLE sets the number
// of hand-offs per cell:
//
//	PGFENCE_WAKE_TABLE=45 go test -run TestWakeTable -v -count=1 -timeout 30m ./internal/listen/
func TestWakeTable(t *testing.T) {
	n := tableRuns(t)
	cols := []column{directColumn(t), listenPoolColumn(t), bouncerColumn(t)}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| %d hand-offs per cell, p50 (p90) | direct | PgBouncer + listen pool | PgBouncer |\n|---|---|---|---|\n", n)
	row := func(name string, got [][]time.Duration, listens bool) {
		cell := func(ds []time.Duration) string {
			return fmt.Sprintf("%v (%v)", median(ds).Round(100*time.Microsecond), percentile(ds, 90).Round(100*time.Microsecond))
		}
		if listens {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", name, cell(got[0]), cell(got[1]), cell(got[2]))
		} else { // nothing listens: a listen pool does not apply
			fmt.Fprintf(&b, "| %s | %s | (no listener) | %s |\n", name, cell(got[0]), cell(got[1]))
		}
	}
	for _, mode := range []leaseMode{modeBackoff, modeWake, modeFair, modeBoth} {
		used := cols
		if !mode.wake {
			used = []column{cols[0], cols[2]}
		}
		var pairs []pair
		for _, col := range used {
			pairs = append(pairs, newPair(t, col, mode, nil))
		}
		key := fmt.Sprintf("%s/%d", t.Name(), mrand.Int64())
		row(mode.name, interleaved(n, len(pairs), func(i int) time.Duration { return pairs[i].handoff(t, key, hold()) }), mode.wake)
		for _, p := range pairs {
			p.holder.Close()
			p.waiter.Close()
		}
	}
	var runners []*runner
	for _, col := range cols {
		runners = append(runners, startRunner(t, col, true, 5*time.Second, nil))
	}
	// Each job comes at a random point of the poll interval, as jobs do.
	row("claim.Runner, WithListen, poll 5 s", interleaved(n, len(runners), func(i int) time.Duration {
		return runners[i].pickup(t, gap()+mrand.N(5*time.Second))
	}), true)
	t.Log(b.String())
}

// tableRuns is PGFENCE_WAKE_TABLE, or a skip when it is unset.
func tableRuns(t *testing.T) int {
	t.Helper()
	v := strings.TrimSpace(os.Getenv(tableVariable))
	if v == "" {
		t.Skip(tableVariable + " is unset: set it to the number of hand-offs per cell to measure the table")
	}
	var n int
	if _, err := fmt.Sscan(v, &n); err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number of hand-offs per cell", tableVariable, v)
	}
	return n
}
