//go:build linux

package pglease_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// handoffWorkerEnv makes the test binary a hand-off worker process (see
// handoffWorkerMain) instead of running tests.
const handoffWorkerEnv = "PGFENCE_HANDOFF_WORKER"

// handoffWorkerMain runs a worker, configured as "url|key|waiters|kind|wake":
// one client (one pool, one listener with wake) whose waiters goroutines
// take key again and again as fair waiters (kind "mutex": Acquire, the
// plain, exclusive lease; kind "permit": the one permit of a semaphore of
// 1), hold it 1 ms and release it. It prints
// "g <fence> <unix ns>" when Acquire returns, "r <fence> <unix ns>" just
// before Release is sent and "x <fence> <unix ns>" when it returned; on each "mark" line on stdin, "s <n>": the
// statements its pool has sent so far. It stops when stdin closes.
func handoffWorkerMain() int {
	f := strings.Split(os.Getenv(handoffWorkerEnv), "|")
	n, _ := strconv.Atoi(f[2])
	if err := runHandoffWorker(f[0], f[1], n, f[3], f[4] == "1"); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	return 0
}

func runHandoffWorker(url, key string, n int, kind string, wake bool) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sent queryCounter
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	cfg.ConnConfig.Tracer = &sent
	cfg.MaxConns = int32(n + 2)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	opts := []pglease.Option{pglease.WithFairWaiting(), pglease.WithoutAutoRenew(), pglease.WithOwner(fmt.Sprintf("handoff-%d", os.Getpid()))}
	if wake {
		opts = append(opts, pglease.WithWakeOnRelease())
	}
	c, err := pglease.New(pool, opts...)
	if err != nil {
		return err
	}
	defer c.Close()
	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			say("s %d", sent.n.Load())
		}
		cancel()
	}()
	acquire := func() (*pglease.Lease, error) { return c.Acquire(ctx, key, 30*time.Second) }
	if kind == "permit" {
		acquire = func() (*pglease.Lease, error) { return c.Acquire(ctx, key, 30*time.Second, pglease.Permits(1)) }
	}
	var wg sync.WaitGroup
	var failed atomic.Value
	for range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				l, err := acquire()
				if err != nil {
					if ctx.Err() == nil {
						failed.Store(err)
						cancel()
					}
					return
				}
				say("g %d %d", l.Fence(), time.Now().UnixNano())
				time.Sleep(time.Millisecond)
				say("r %d %d", l.Fence(), time.Now().UnixNano())
				l.Release(context.WithoutCancel(ctx))
				say("x %d %d", l.Fence(), time.Now().UnixNano())
			}
		})
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		return err
	}
	return nil
}

// handoffRun is what the parent gathered from its workers in one run.
type handoffRun struct {
	latencies []time.Duration // release of one grant to the return of the next one's Acquire
	releases  []time.Duration // how long those Release calls took
	stmts     int64           // statements sent between the two marks
	handoffs  int             // grants between the two marks
}

// runHandoffProcesses starts procs worker processes of waiters/procs fair
// waiters each on one key, lets them settle, measures for d, and stops them.
func runHandoffProcesses(tb testing.TB, procs, waiters int, kind string, wake bool, d time.Duration) handoffRun {
	key := fmt.Sprintf("handoff/%s/%d/%v/%d", kind, waiters, wake, time.Now().UnixNano())
	wakeArg := "0"
	if wake {
		wakeArg = "1"
	}
	type event struct {
		fence int64
		at    int64
	}
	var mu sync.Mutex
	grants, releases, returned := map[int64]int64{}, map[int64]int64{}, map[int64]int64{}
	marks := make(chan int64, 2*procs)
	var cmds []*exec.Cmd
	var stdins []interface{ Close() error }
	var stdinW []*os.File
	var readers sync.WaitGroup
	for range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), handoffWorkerEnv+"="+strings.Join([]string{pgtest.URL(), key, strconv.Itoa(waiters / procs), kind, wakeArg}, "|"))
		r, w, err := os.Pipe()
		if err != nil {
			tb.Fatal(err)
		}
		cmd.Stdin = r
		out, err := cmd.StdoutPipe()
		if err != nil {
			tb.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			tb.Fatal(err)
		}
		r.Close()
		cmds, stdins, stdinW = append(cmds, cmd), append(stdins, w), append(stdinW, w)
		readers.Go(func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				var what string
				var a, b int64
				fmt.Sscanf(sc.Text(), "%s %d %d", &what, &a, &b)
				mu.Lock()
				switch what {
				case "g":
					grants[a] = b
				case "r":
					releases[a] = b
				case "x":
					returned[a] = b
				case "s":
					marks <- a
				}
				mu.Unlock()
			}
		})
	}
	tb.Cleanup(func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
	})
	mark := func() (sum int64, at int64) {
		at = time.Now().UnixNano()
		for _, w := range stdinW {
			fmt.Fprintln(w, "mark")
		}
		for range procs {
			select {
			case n := <-marks:
				sum += n
			case <-time.After(10 * time.Second):
				tb.Fatal("a worker did not answer a mark")
			}
		}
		return sum, at
	}
	time.Sleep(2 * time.Second) // every waiter queued, listeners up
	s0, t0 := mark()
	time.Sleep(d)
	s1, t1 := mark()
	for _, w := range stdins {
		w.Close()
	}
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			tb.Errorf("worker %d: %v", c.Process.Pid, err)
		}
	}
	readers.Wait()
	var run handoffRun
	run.stmts = s1 - s0
	var events []event
	for f, at := range grants {
		events = append(events, event{f, at})
	}
	slices.SortFunc(events, func(a, b event) int { return int(a.fence - b.fence) })
	for i, e := range events {
		if e.at < t0 || e.at > t1 {
			continue
		}
		run.handoffs++
		if i == 0 {
			continue
		}
		prev := events[i-1].fence
		if rel, ok := releases[prev]; ok {
			run.latencies = append(run.latencies, time.Duration(e.at-rel))
			if end, ok := returned[prev]; ok {
				run.releases = append(run.releases, time.Duration(end-rel))
			}
		}
	}
	slices.Sort(run.latencies)
	slices.Sort(run.releases)
	return run
}

// handoffMeasured is how long BenchmarkFairHandoffProcesses measures each
// case, after the waiters settled.
const handoffMeasured = 5 * time.Second

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// BenchmarkFairHandoffProcesses: 10 and 50 fair waiters in 5 worker
// processes (this test binary, re-executed; one client each) take one key
// in turn, each holding it 1 ms, for handoffMeasured (once: the first run
// outlasts the default benchtime, so b.N stays 1), with and without
// wake-on-release, for a plain lease and a semaphore's permit. It reports the p50 and p99
// from the start of a release to the return of the next holder's Acquire
// (by the wall clock, which the processes share), and the statements the
// workers' pools sent per hand-off (counted by a pgx tracer in each worker,
// the listener's connection included), and the p50 of the Release calls
// alone (the rest of a hand-off is the wake-up and the next attempt).
func BenchmarkFairHandoffProcesses(b *testing.B) {
	for _, kind := range []string{"mutex", "permit"} {
		for _, wake := range []bool{true, false} {
			for _, waiters := range []int{10, 50} {
				b.Run(fmt.Sprintf("kind=%s/wake=%v/waiters=%d", kind, wake, waiters), func(b *testing.B) {
					benchHandoff(b, 5, waiters, kind, wake)
				})
			}
		}
	}
	// Many clients: each is a process with a listener of its own, which a
	// wake-up meant for another client's waiter must not disturb.
	b.Run("kind=mutex/wake=true/waiters=32/procs=16", func(b *testing.B) { benchHandoff(b, 16, 32, "mutex", true) })
}

// benchHandoff measures hand-offs between waiters fair waiters spread over
// procs processes, and reports them.
func benchHandoff(b *testing.B, procs, waiters int, kind string, wake bool) {
	run := runHandoffProcesses(b, procs, waiters, kind, wake, handoffMeasured)
	if run.handoffs == 0 {
		b.Fatal("no hand-off")
	}
	b.ReportMetric(float64(quantile(run.latencies, 0.5))/1e6, "p50-ms")
	b.ReportMetric(float64(quantile(run.latencies, 0.99))/1e6, "p99-ms")
	b.ReportMetric(float64(quantile(run.releases, 0.5))/1e6, "release-p50-ms")
	b.ReportMetric(float64(run.stmts)/float64(run.handoffs), "stmts/handoff")
	b.ReportMetric(float64(run.handoffs), "handoffs")
}
