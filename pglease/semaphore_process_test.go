//go:build linux

package pglease_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
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

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/internal/testsupport/proc"
	"github.com/pgfence/pgfence/pgguard"
	"github.com/pgfence/pgfence/pglease"
)

// semWorkerEnv makes the test binary a semaphore worker process (see
// semWorkerMain) instead of running tests.
const semWorkerEnv = "PGFENCE_SEM_WORKER"

// semWorker is the configuration a worker process reads from its
// environment, as "url|key|permits|goroutines|table|stuck".
type semWorker struct {
	url, key, table string
	permits, n      int
	stuck           bool // one goroutine holds a permit and writes late (the process is SIGSTOP'd meanwhile)
}

// semWorkerMain runs a worker: n goroutines take permits of the semaphore
// and, under each, write the permit's slot row through a pgguard.Guard
// twice, until stdin closes. With stuck, one goroutine instead takes a
// permit, writes, prints "held <fence> <slot>", waits 3 s (the parent
// freezes the process meanwhile), writes again and prints the outcome:
// "stale <presented> <current>", or "ok" (a stale write accepted).
func semWorkerMain() int {
	f := strings.Split(os.Getenv(semWorkerEnv), "|")
	permits, _ := strconv.Atoi(f[2])
	n, _ := strconv.Atoi(f[3])
	w := semWorker{url: f[0], key: f[1], permits: permits, n: n, table: f[4], stuck: f[5] == "1"}
	if err := w.run(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	return 0
}

func (w semWorker) run() error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, err := pgxpool.New(ctx, w.url)
	if err != nil {
		return err
	}
	defer pool.Close()
	c, err := pglease.New(pool, pglease.WithOwner(fmt.Sprintf("worker-%d", os.Getpid())),
		pglease.WithBackoff(time.Millisecond, 20*time.Millisecond))
	if err != nil {
		return err
	}
	defer c.Close()
	sem := semaphoreKey{c, w.key, w.permits}
	g, err := pgguard.NewGuard(ctx, pool, pgguard.Table{Name: w.table, KeyColumn: "slot"})
	if err != nil {
		return err
	}
	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		defer out.Unlock()
		// One line per message: a joined error spans several.
		fmt.Println(strings.ReplaceAll(fmt.Sprintf(format, args...), "\n", "; "))
	}
	write := func(l *pglease.Lease) error {
		return g.Update(ctx, pool, l.Slot(), l.Fence(), pgguard.Values{"writer": os.Getpid()})
	}
	go func() { // stdin closed: stop
		bufio.NewReader(os.Stdin).ReadString('\n')
		cancel()
	}()
	var wg sync.WaitGroup
	errs := make(chan error, w.n)
	for i := range w.n {
		wg.Go(func() {
			if w.stuck && i == 0 {
				errs <- w.stuckHolder(ctx, sem, write, say)
				return
			}
			for ctx.Err() == nil {
				err := sem.Do(ctx, time.Second, func(fnCtx context.Context, l *pglease.Lease) error {
					if err := write(l); err != nil {
						return err
					}
					time.Sleep(time.Duration(1+rand.IntN(20)) * time.Millisecond)
					return write(l)
				})
				switch {
				case err == nil, ctx.Err() != nil:
				case errors.Is(err, pgguard.ErrStaleFence), errors.Is(err, pgfence.ErrLeaseLost):
					// This process was frozen while the goroutine held a
					// permit: its late write is refused, as it must be.
					say("refused %v", err)
				default:
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return errors.Join(func() []error {
		var all []error
		for e := range errs {
			all = append(all, e)
		}
		return all
	}()...)
}

func (w semWorker) stuckHolder(ctx context.Context, sem semaphoreKey, write func(*pglease.Lease) error, say func(string, ...any)) error {
	l, err := sem.Acquire(ctx, time.Second)
	if err != nil {
		return err
	}
	defer l.Release(context.Background())
	if err := write(l); err != nil {
		return err
	}
	say("held %d %d", l.Fence(), l.Slot())
	time.Sleep(3 * time.Second) // frozen by the parent for most of it
	err = write(l)
	var stale *pgguard.StaleFenceError
	switch {
	case errors.As(err, &stale):
		say("stale %d %d", stale.Presented, stale.Current)
	case err == nil:
		say("ok")
	default:
		say("error %v", err)
	}
	return nil
}

type semProc struct {
	cmd   *exec.Cmd
	lines chan string
	errb  *bytes.Buffer
	stdin interface{ Close() error }
}

func startSemWorker(t *testing.T, w semWorker) *semProc {
	t.Helper()
	stuck := "0"
	if w.stuck {
		stuck = "1"
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), semWorkerEnv+"="+strings.Join([]string{w.url, w.key, strconv.Itoa(w.permits), strconv.Itoa(w.n), w.table, stuck}, "|"))
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &semProc{cmd: cmd, lines: make(chan string, 1024), errb: new(bytes.Buffer), stdin: in}
	cmd.Stderr = p.errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
	})
	return p
}

// stop ends the worker (stdin closes) and waits; it fails the test if the
// worker failed.
func (p *semProc) stop(t *testing.T) {
	t.Helper()
	p.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("worker %d: %v; stderr:\n%s", p.cmd.Process.Pid, err, p.errb)
		}
	case <-time.After(15 * time.Second):
		t.Errorf("worker %d did not exit; stderr:\n%s", p.cmd.Process.Pid, p.errb)
	}
}

func (p *semProc) recv(t *testing.T, prefix string, timeout time.Duration) string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("worker exited before %q; stderr:\n%s", prefix, p.errb)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-deadline:
			t.Fatalf("no %q from the worker within %v; stderr:\n%s", prefix, timeout, p.errb)
		}
	}
}

// watchPermits polls the database's record of key's permits until stop
// closes: the most unexpired permits seen at once (by now() of the polling
// statement), and whether two unexpired permits ever shared a fence.
func watchPermits(t *testing.T, pool *pgxpool.Pool, key string, stop <-chan struct{}) (peak *atomic.Int64, done <-chan struct{}) {
	peak = new(atomic.Int64)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-stop:
				return
			default:
			}
			var held, fences int64
			err := pool.QueryRow(context.Background(),
				`SELECT count(*), count(DISTINCT fence) FROM lock_leases WHERE slot > 0 AND lock_key = $1 AND expires_at > now()`, key).Scan(&held, &fences)
			if err != nil {
				t.Error(err)
				return
			}
			if held != fences {
				t.Errorf("%d unexpired permits carry %d distinct fences", held, fences)
			}
			if held > peak.Load() {
				peak.Store(held)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return peak, finished
}

// 32 goroutines in 4 processes take the 3 permits of one semaphore and,
// under each permit, write the permit's slot row through a guard. One
// process is frozen (SIGSTOP) for 2.5 s while one of its goroutines holds a
// permit with a 1 s TTL; the others go on. The database's record never shows
// more than 3 unexpired permits, and shows 3 at the peak; when the frozen
// process runs again, its holder's late write is refused by the slot row's
// fence, which a newer holder of that slot has written.
func TestSemaphoreProcessesWithFrozenHolder(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	const permits = 3
	key := uniqueKey(t)
	table := fmt.Sprintf("sem_slots_%d", rand.Int64N(1<<40))
	if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (slot int PRIMARY KEY, writer int, last_fence bigint NOT NULL DEFAULT 0);
		INSERT INTO %[1]s (slot) SELECT generate_series(0, %d)`, table, permits-1)); err != nil {
		t.Fatal(err)
	}
	stopWatch := make(chan struct{})
	peak, watched := watchPermits(t, pool, key, stopWatch)

	w := semWorker{url: pgtest.URL(), key: key, table: table, permits: permits, n: 8}
	stuckW := w
	stuckW.stuck = true
	frozen := startSemWorker(t, stuckW)
	var others []*semProc
	for range 3 {
		others = append(others, startSemWorker(t, w))
	}
	held := frozen.recv(t, "held ", 20*time.Second)
	var fence int64
	var slot int
	fmt.Sscanf(held, "held %d %d", &fence, &slot)
	if err := proc.Stop(frozen.cmd.Process.Pid, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // past the 1 s TTL by any clock
	// While it is frozen, the others have the permits: the slot row it wrote
	// has a newer fence by now (every slot is taken again and again).
	var rowFence int64
	if err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT last_fence FROM %s WHERE slot = $1`, table), slot).Scan(&rowFence); err != nil {
		t.Fatal(err)
	}
	if rowFence <= fence {
		t.Fatalf("slot %d's row still carries fence %d (the frozen holder's %d) after 2.5 s: the others did not take the slot", slot, rowFence, fence)
	}
	frozen.cmd.Process.Signal(syscall.SIGCONT)
	got := frozen.recv(t, "", 10*time.Second)
	for strings.HasPrefix(got, "refused ") { // other goroutines of the frozen process
		got = frozen.recv(t, "", 10*time.Second)
	}
	if !strings.HasPrefix(got, "stale ") {
		t.Fatalf("the frozen holder's late write (fence %d, slot %d) answered %q, want a stale-fence refusal", fence, slot, got)
	}
	time.Sleep(500 * time.Millisecond)
	for _, p := range append(others, frozen) {
		p.stop(t)
	}
	close(stopWatch)
	<-watched
	t.Logf("frozen holder: fence %d on slot %d, refused: %s; peak unexpired permits %d", fence, slot, got, peak.Load())
	if peak.Load() != permits {
		t.Fatalf("peak unexpired permits on the database's record: %d, want %d (never more, and all used)", peak.Load(), permits)
	}
}
