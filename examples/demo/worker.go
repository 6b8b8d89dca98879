package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/examples/story"
	"github.com/pgfence/pgfence/pglease"
)

// workerArg, as the first argument, makes this program a billing instance
// of the stale-writer scenes instead of the demo.
const workerArg = "-worker"

// workerURL is the environment variable that hands the worker its database
// (the environment, not argv, which ps shows).
const workerURL = "PGFENCE_DEMO_WORKER_URL"

// worker is a billing instance running as a separate process, driven over
// its stdin and stdout so that it can be frozen at a precise step.
type worker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	name  string
}

// startWorker starts this program again as a worker.
func startWorker(ctx context.Context, env *story.Env, name string, fenced bool) (*worker, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	mode := "fenced"
	if !fenced {
		mode = "unfenced"
	}
	cmd := exec.CommandContext(ctx, self, workerArg, name, mode)
	cmd.Env = append(os.Environ(), workerURL+"="+env.ConnString())
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = procAttr()
	w := &worker{cmd: cmd, name: name, lines: make(chan string, 16)}
	if w.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go w.read(stdout)
	return w, nil
}

func (w *worker) read(stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		w.lines <- sc.Text()
	}
	close(w.lines)
}

// expect waits for the worker's next line, which must start with word, and
// returns the rest of it.
func (w *worker) expect(word string) (string, error) {
	select {
	case line, ok := <-w.lines:
		if !ok {
			return "", fmt.Errorf("%s exited before reporting %s", w.name, word)
		}
		if rest, found := strings.CutPrefix(line+" ", word+" "); found {
			return strings.TrimSuffix(rest, " "), nil
		}
		return "", fmt.Errorf("%s: expected %s, got %q", w.name, word, line)
	case <-time.After(15 * time.Second):
		return "", fmt.Errorf("%s: no %s report within 15s", w.name, word)
	}
}

// kill ends the worker, frozen or not.
func (w *worker) kill() {
	w.stdin.Close()
	w.cmd.Process.Signal(syscall.SIGCONT)
	done := make(chan struct{})
	go func() { w.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		w.cmd.Process.Kill()
		<-done
	}
}

// runWorker is the worker's side: one billing instance that reports each
// step on stdout and waits, just before its write, for a line on stdin (the
// demo freezes it there).
func runWorker(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "demo: the worker mode is internal to the demo")
		return story.ExitFail
	}
	name, fenced := args[0], args[1] == "fenced"
	if err := workerSteps(context.Background(), name, fenced); err != nil {
		say("ERR %v", err)
		return story.ExitFail
	}
	return story.ExitPass
}

func say(format string, a ...any) { fmt.Printf(format+"\n", a...) }

func workerSteps(ctx context.Context, name string, fenced bool) error {
	pool, err := pgxpool.New(ctx, os.Getenv(workerURL))
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := pglease.New(pool, pglease.WithOwner(name))
	if err != nil {
		return err
	}
	defer client.Close()
	lease, err := client.TryAcquire(ctx, key, ttl)
	if err != nil {
		return err
	}
	say("ACQUIRED %d", lease.Fence())
	if err := readAndCheck(ctx, pool, lease); err != nil {
		return err
	}
	// The freeze lands here; the demo resumes us with GO in the pipe.
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	return writeLate(ctx, pool, lease, name, fenced)
}

// readAndCheck reads the job and checks the lease, as a careful worker does
// before it writes.
func readAndCheck(ctx context.Context, pool *pgxpool.Pool, lease *pglease.Lease) error {
	status, fence, err := jobRow(ctx, pool)
	if err != nil {
		return err
	}
	say("READ %s (row fence %d)", status, fence)
	if err := context.Cause(lease.Context()); err != nil {
		say("CHECKED lost: %v", err)
	} else {
		say("CHECKED valid; about to send")
	}
	return nil
}

// writeLate sends with the fence it was granted before the freeze, then
// reports what its own lease client says now.
func writeLate(ctx context.Context, pool *pgxpool.Pool, lease *pglease.Lease, name string, fenced bool) error {
	o, err := send(ctx, pool, fenced, name, lease.Fence())
	if err != nil {
		return err
	}
	if o.refusal != nil {
		say("WROTE %v %d %s", o.sent, o.current, strings.ReplaceAll(o.refusal.Error(), "\n", " "))
	} else {
		say("WROTE %v %d", o.sent, o.current)
	}
	// Let a timer that was due during the freeze fire, as it does a moment
	// after any real resume; then report the client's own view.
	time.Sleep(50 * time.Millisecond)
	if err := context.Cause(lease.Context()); err != nil {
		say("LOCAL %v", err)
	} else {
		say("LOCAL lease still valid")
	}
	say("DONE")
	return nil
}
