//go:build linux

package pgguard_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/internal/testsupport/proc"
	"github.com/pgfence/pgfence/pgguard"
)

type worker struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  chan string
	stderr *bytes.Buffer
}

func startWorker(t *testing.T, name string) *worker {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"="+name, workerURLEnv+"="+pgtest.URL())
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	w := &worker{t: t, name: name, cmd: cmd, in: in, lines: make(chan string, 16), stderr: new(bytes.Buffer)}
	cmd.Stderr = w.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
		close(w.lines)
	}()
	t.Cleanup(func() {
		w.cmd.Process.Signal(syscall.SIGCONT)
		w.in.Close()
		done := make(chan error, 1)
		go func() { done <- w.cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("worker %s: %v; stderr:\n%s", name, err, w.stderr)
			}
		case <-time.After(10 * time.Second):
			w.cmd.Process.Kill()
			<-done
			t.Errorf("worker %s did not exit; stderr:\n%s", name, w.stderr)
		}
	})
	return w
}

func (w *worker) send(format string, args ...any) {
	w.t.Helper()
	if _, err := fmt.Fprintf(w.in, format+"\n", args...); err != nil {
		w.t.Fatalf("worker %s: %v", w.name, err)
	}
}

func (w *worker) recv(timeout time.Duration) string {
	w.t.Helper()
	select {
	case l, ok := <-w.lines:
		if !ok {
			w.t.Fatalf("worker %s exited; stderr:\n%s", w.name, w.stderr)
		}
		return l
	case <-time.After(timeout):
		w.t.Fatalf("worker %s: no answer within %v; stderr:\n%s", w.name, timeout, w.stderr)
	}
	return ""
}

func (w *worker) fence(timeout time.Duration) int64 {
	w.t.Helper()
	l := w.recv(timeout)
	n, err := strconv.ParseInt(strings.TrimPrefix(l, "fence "), 10, 64)
	if !strings.HasPrefix(l, "fence ") || err != nil {
		w.t.Fatalf("worker %s: want a fence, got %q", w.name, l)
	}
	return n
}

func (w *worker) signal(sig syscall.Signal) {
	w.t.Helper()
	if err := w.cmd.Process.Signal(sig); err != nil {
		w.t.Fatalf("worker %s: %v: %v", w.name, sig, err)
	}
}

// TestTimelineProcesses is the stale-writer timeline with an OS process per
// worker: A acquires a 1 s lease (no renewal) and is frozen with SIGSTOP for
// about 2 s, with its write already sent to it; B acquires once A's lease has
// expired by the database clock, and writes; A gets SIGCONT and performs its
// write. A's write must be refused, every time. Timings (B's start, the
// freeze, A's and B's kinds of write) are drawn at random; the random
// seed is logged.
func TestTimelineProcesses(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	guarded := newTable(t, pool)
	enforced := newTable(t, pool)
	if err := pgguard.InstallTrigger(ctx, pool, pgguard.Table{Name: enforced}, pgguard.Strict); err != nil {
		t.Fatal(err)
	}

	const lanes, perLane = 4, 6
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d; %d runs in %d parallel lanes", seed, lanes*perLane, lanes)
	var refused, accepted atomic.Int64
	var mu sync.Mutex
	var bWaits, freezes []time.Duration

	t.Run("lanes", func(t *testing.T) {
		for lane := range lanes {
			t.Run(fmt.Sprintf("lane%d", lane), func(t *testing.T) {
				t.Parallel()
				rng := rand.New(rand.NewPCG(seed, uint64(lane)))
				for i := range perLane {
					key := fmt.Sprintf("inv_%d_%d", lane, i)
					table, aKind := guarded, "update"
					if rng.IntN(2) == 1 {
						table, aKind = enforced, "raw"
					}
					bKind := []string{"update", "claimwrite"}[rng.IntN(2)]
					insertRow(t, pool, table, key)

					a, b := startWorker(t, "A"), startWorker(t, "B")
					a.send("acquire invoice:%s 1000 0", key)
					fa := a.fence(10 * time.Second)
					// proc.Stop waits until every thread of A is stopped:
					// kill(2) returns before the target stops, and A might
					// still read its write and run it inside its lease.
					if err := proc.Stop(a.cmd.Process.Pid, 5*time.Second); err != nil {
						t.Fatal(err)
					}
					stopped := time.Now()
					// A's write is on its way: it sits in A's input, and A
					// acts on it the moment it runs again.
					a.send("%s %s %s A", aKind, table, key)

					// A random pause before B starts: the timings are what
					// this test varies.
					time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
					b.send("acquire invoice:%s 5000 1", key)
					fb := b.fence(10 * time.Second)
					bWait := time.Since(stopped)
					if fb <= fa {
						t.Fatalf("B's fence %d is not above A's %d", fb, fa)
					}
					b.send("%s %s %s B", bKind, table, key)
					if l := b.recv(10 * time.Second); l != "ok" {
						t.Fatalf("B's %s: %s", bKind, l)
					}
					// A stays frozen for a drawn interval, past its 1s TTL
					// by the database clock: the freeze is the event under
					// test, no signal can stand for it.
					freeze := 1500*time.Millisecond + time.Duration(rng.IntN(1000))*time.Millisecond
					time.Sleep(time.Until(stopped.Add(freeze)))
					freeze = time.Since(stopped)
					a.signal(syscall.SIGCONT)

					got := a.recv(15 * time.Second)
					want := fmt.Sprintf("stale %d %d", fa, fb)
					if got == want {
						refused.Add(1)
					} else {
						if got == "ok" {
							accepted.Add(1)
						}
						t.Errorf("run %s (A %s, B %s, frozen %v): A's late write answered %q, want %q",
							key, aKind, bKind, freeze.Round(time.Millisecond), got, want)
					}
					if r := readRow(t, pool, table, key); r.Writer != "B" || r.Fence != fb || r.Status != "DONE" {
						t.Errorf("run %s: row after the timeline: %+v, want B's write with fence %d", key, r, fb)
					}
					b.send("release")
					if l := b.recv(10 * time.Second); l != "ok" {
						t.Errorf("B's release: %s", l)
					}
					a.send("exit")
					b.send("exit")
					mu.Lock()
					bWaits = append(bWaits, bWait)
					freezes = append(freezes, freeze)
					mu.Unlock()
				}
			})
		}
	})
	t.Logf("A's late write refused %d times, accepted %d times", refused.Load(), accepted.Load())
	t.Logf("B acquired %v to %v after A froze; A was frozen %v to %v", minDur(bWaits), maxDur(bWaits), minDur(freezes), maxDur(freezes))
	if accepted.Load() != 0 || refused.Load() != lanes*perLane {
		t.Fatalf("stale writes accepted: %d; refused: %d of %d", accepted.Load(), refused.Load(), lanes*perLane)
	}
}

func minDur(ds []time.Duration) time.Duration {
	m := time.Duration(1<<63 - 1)
	for _, d := range ds {
		m = min(m, d)
	}
	return m.Round(time.Millisecond)
}

func maxDur(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m.Round(time.Millisecond)
}
