package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	pgf "github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/cmd/pgfence/internal/oddrow"
	"github.com/pgfence/pgfence/internal/validate"
	"github.com/pgfence/pgfence/pglease"
)

const execUsage = `Usage: pgfence exec --key KEY [--ttl 30s] [--wait D | --skip-if-held] [--shared | --permits N] [flags] -- COMMAND [ARGS...]

Runs COMMAND while holding a lease on KEY, renewing it, like flock,
etcdctl lock and consul lock, with a fencing token. The command gets:
  PGFENCE_KEY    the key
  PGFENCE_FENCE  the lease's fencing token: pass it to every protected write
                 (UPDATE ... WHERE last_fence <= $fence) so that a write made
                 after the lease was lost is refused
  PGFENCE_OWNER  the owner label stored with the lease
When the command ends the lease is released and pgfence exits with the
command's code.

A key is one lock, whatever kind its holders ask for (as in Go and SQL):
  (default)     the exclusive lease: one holder, beside no other of any kind
                (--exclusive says the same)
  --shared      a shared lease: any number at once, none beside an exclusive
                one; a waiting exclusive lease keeps new shared ones out
  --permits N   one of N permits (PGFENCE_SLOT is its slot, 0 to N-1); a key
                held shared, or as permits of another N, refuses it (exit 1,
                naming the kind it is held in), and the other way round
  --key K --key L ...  all the keys at once, exclusively, or none
                (PGFENCE_FENCES lists "FENCE KEY" per line)
--hold-at-least D keeps the key held until D after the grant even when the
command ends sooner, so that a scheduled run that fires a little later
elsewhere finds it held.

Without --wait, a key held by another owner ends pgfence at once, with exit
code 81 or the one --conflict-exit-code sets (0 for cron and systemd, where
"someone else is doing it" is not a failure). With --wait, waiters of one
key run in the order they started waiting, every kind in one queue kept by
the database; a release wakes the first waiters at once.

SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to the command (it runs in
its own process group). If the lease is lost while the command runs
(renewals failed until the local deadline, TTL minus a tenth, or the
process was frozen past the TTL), pgfence sends SIGTERM to the command's
process group, SIGKILL after --grace, and exits 83. Work the command already
sent may still land: only the fence checked at the resource stops it. On a
terminal the command gets the terminal as a shell's job would (Ctrl-C,
Ctrl-Z, fg): docs/cli.md says how.

Exit codes: the command's own, or
  80  usage: missing --key, bad duration, no command, malformed URL
  1   another failure (pgfence could not do what was asked; the message says why)
  81  the key is held by another owner (--skip-if-held, or no --wait; see --conflict-exit-code)
  82  --wait ran out while the key stayed held
  83  the lease was lost while the command ran; the command was terminated
  84  the database is unreachable (nothing was run; see --fail-open)
  85  the database refused (schema missing: run pgfence migrate up; login or permission denied)
  126 the command cannot be run;  127 the command was not found
  128+N the command was killed by signal N
`

type execOpts struct {
	key, owner, url string
	keys            []string      // every --key, in order given (key is the first)
	permits         int           // --permits: a semaphore of that many permits
	shared          bool          // --shared: a shared lease
	exclusive       bool          // --exclusive: the exclusive lease of a shared/exclusive key
	holdAtLeast     time.Duration // --hold-at-least
	ttl, wait       time.Duration
	renew, grace    time.Duration
	skipIfHeld      bool
	conflictCode    int
	failOpen        bool
	argv            []string
}

func (a *app) cmdExec(ctx context.Context, args []string) int {
	var o execOpts
	fset := a.newFlags("exec", execUsage, &o.url)
	fset.Func("key", "the lock key (required), e.g. invoice:inv_72; given several times, all the keys are taken together or none is", func(k string) error {
		o.keys = append(o.keys, k)
		return nil
	})
	fset.IntVar(&o.permits, "permits", 0, "take one of `N` permits of the key (a semaphore): at most N holders at once, each with its own fence; PGFENCE_SLOT is the permit's slot, 0 to N-1")
	fset.BoolVar(&o.shared, "shared", false, "take a shared lease: any number of shared holders at once, none beside an exclusive (plain) lease")
	fset.BoolVar(&o.exclusive, "exclusive", false, "take the exclusive lease, as without a kind flag (the default kind): it excludes every other holder; while it waits (--wait), no new --shared lease is granted")
	durVar(fset, &o.holdAtLeast, "hold-at-least", 0, "keep the key held until this `duration` after the grant, by the database clock, even when the command ends sooner (scheduled work)")
	durVar(fset, &o.ttl, "ttl", 30*time.Second, "lease length, a `duration` such as 30s; renewed while the command runs")
	durVar(fset, &o.wait, "wait", 0, "wait up to this `duration` for a held key (default: do not wait)")
	fset.BoolVar(&o.skipIfHeld, "skip-if-held", false, "exit at once when the key is held (scheduled work: someone else is doing it); the code is --conflict-exit-code")
	fset.IntVar(&o.conflictCode, "conflict-exit-code", exitHeld, "exit `code` when the key is held and there is no --wait, as flock's option of that name; 0 makes a skipped run a success for cron and systemd")
	durVar(fset, &o.renew, "renew", 0, "renew interval, a `duration` (default: a third of --ttl)")
	durVar(fset, &o.grace, "grace", 10*time.Second, "after SIGTERM on a lost lease, wait this `duration` before SIGKILL")
	fset.BoolVar(&o.failOpen, "fail-open", false, "if the database is unreachable, run the command anyway, without a lease (PGFENCE_FENCE unset, PGFENCE_FAIL_OPEN=1)")
	fset.StringVar(&o.owner, "owner", "", "owner label stored with the lease (default: hostname/pid)")
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	o.argv = fset.Args()
	if len(o.keys) > 0 {
		o.key = o.keys[0]
	}
	if err := o.check(); err != nil {
		return a.exitCode(err)
	}

	// Find the command before taking anything: 127/126 as shells do.
	path, err := exec.LookPath(o.argv[0])
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return a.exitCode(fail(exitNotFound, "pgfence: %s: command not found", o.argv[0]))
		}
		return a.exitCode(fail(exitCannotExec, "pgfence: %s: cannot run: %v", o.argv[0], err))
	}

	// Signals: while acquiring, one ends the attempt; once the command runs,
	// they are forwarded to it.
	sigCh := make(chan os.Signal, 8)
	signal.Notify(sigCh, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigCh)

	acqCtx, cancelAcq := context.WithCancelCause(ctx)
	defer cancelAcq(nil)
	var interrupted os.Signal
	acqDone := make(chan struct{})
	watcherDone := make(chan struct{})
	go func() {
		defer close(watcherDone)
		select {
		case s := <-sigCh:
			interrupted = s
			cancelAcq(fmt.Errorf("interrupted by %v", s))
		case <-acqDone:
		}
	}()

	pool, where, err := a.connect(acqCtx, o.url)
	var client *pglease.Client
	var lease held
	if err == nil {
		defer pool.Close()
		client, err = a.newLeaseClient(pool, o)
		if err != nil {
			close(acqDone)
			<-watcherDone
			return a.exitCode(fail(exitUsage, "pgfence: %v", err))
		}
		defer client.Close()
		lease, err = o.acquire(acqCtx, client)
	}
	close(acqDone)
	<-watcherDone
	if interrupted != nil {
		if lease != nil {
			a.release(lease)
		}
		fmt.Fprintf(a.stderr, "pgfence: interrupted by %v before the command started\n", interrupted)
		return 128 + int(interrupted.(syscall.Signal))
	}
	if err != nil {
		code := a.acquireFailure(pool, where, o, err)
		if code != exitUnreachable || !o.failOpen {
			return code
		}
		fmt.Fprintf(a.stderr, "pgfence: --fail-open: running %s WITHOUT a lease on %q; nothing stops a concurrent run (PGFENCE_FENCE is not set)\n", o.argv[0], o.key)
		return a.runUnprotected(path, o, sigCh)
	}
	return a.runHolding(path, o, lease, client.Owner(), sigCh)
}

func (o *execOpts) check() error {
	if o.key == "" {
		return fail(exitUsage, "pgfence exec: --key is required (the name of what the lease protects, e.g. --key invoice:inv_72)")
	}
	if err := validate.Key(o.key); err != nil {
		return fail(exitUsage, "pgfence exec: --key: %v", err)
	}
	if o.ttl < time.Second || o.ttl > validate.MaxTTL {
		return fail(exitUsage, "pgfence exec: --ttl %v is outside [1s, %v]", o.ttl, validate.MaxTTL)
	}
	if o.renew != 0 && o.renew >= o.ttl {
		return fail(exitUsage, "pgfence exec: --renew %v must be shorter than --ttl %v (a third of it is the default; see pgfence plan)", o.renew, o.ttl)
	}
	if err := o.checkKind(); err != nil {
		return err
	}
	if o.wait > 0 && o.skipIfHeld {
		return fail(exitUsage, "pgfence exec: --wait and --skip-if-held exclude each other")
	}
	if o.conflictCode < 0 || o.conflictCode > 255 {
		return fail(exitUsage, "pgfence exec: --conflict-exit-code %d is outside [0, 255]", o.conflictCode)
	}
	if o.grace <= 0 {
		return fail(exitUsage, "pgfence exec: --grace must be positive")
	}
	if len(o.argv) == 0 {
		return fail(exitUsage, "pgfence exec: no command given: put it after --, e.g. pgfence exec --key %s --ttl %v -- ./job.sh", o.key, o.ttl)
	}
	return nil
}

func (a *app) newLeaseClient(pool *pgxpool.Pool, o execOpts) (*pglease.Client, error) {
	logger := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts := []pglease.Option{pglease.WithLogger(logger)}
	if s := a.schemaName(); s != "" {
		opts = append(opts, pglease.WithSchema(s))
	}
	if o.owner != "" {
		opts = append(opts, pglease.WithOwner(o.owner))
	}
	if o.renew > 0 {
		opts = append(opts, pglease.WithRenewInterval(o.renew))
	}
	if o.wait > 0 {
		// Waiters of one key are granted it in the order they came, woken
		// by the database when their turn comes.
		opts = append(opts, pglease.WithMaxWait(o.wait), pglease.WithFairWaiting(), pglease.WithWakeOnRelease())
	}
	return pglease.New(pool, opts...)
}

// acquireFailure explains why no lease was taken and returns the exit code.
func (a *app) acquireFailure(pool *pgxpool.Pool, where string, o execOpts, err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return a.exitCode(ee)
	}
	switch {
	case errors.Is(err, pgf.ErrNotAcquired):
		holder := ""
		if o.mutex() { // the holder of a mutex lease is one row to show
			holder = a.holder(pool, o.key)
		}
		if len(o.keys) > 1 && o.wait <= 0 {
			return a.exitCode(fail(o.conflictCode, "%v (exit %d; none of the keys was taken)", err, o.conflictCode))
		}
		if o.wait > 0 { // Acquire waited (--wait) and gave up
			return a.exitCode(fail(exitWaitExpired, "pgfence: %q is still held%s after waiting %v; gave up (exit %d)", o.key, holder, o.wait, exitWaitExpired))
		}
		if o.skipIfHeld {
			return a.exitCode(fail(o.conflictCode, "pgfence: %q is held%s; skipped (exit %d)", o.key, holder, o.conflictCode))
		}
		return a.exitCode(fail(o.conflictCode, "pgfence: %q is held%s (exit %d; use --wait D to wait for it, --skip-if-held --conflict-exit-code 0 to make skipping a success)", o.key, holder, o.conflictCode))
	case errors.Is(err, pgf.ErrInvalidInput):
		return a.exitCode(fail(exitUsage, "pgfence exec: %v", err))
	}
	return a.exitCode(dbError(where, err))
}

// holder describes who holds key, for messages; "" if unknown.
func (a *app) holder(pool *pgxpool.Pool, key string) string {
	if pool == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	row, err := a.queries(pool).GetLease(ctx, key)
	if err != nil || !row.Held {
		return ""
	}
	owner, _ := oddrow.Text(row.Owner)
	left := span(row.DbNow, row.ExpiresAt) + " left by the database clock"
	if row.ExpiresAt.Equal(oddrow.Infinity) {
		left = "it never expires: its expiry is infinity"
	}
	return fmt.Sprintf(" by %s (fence %d, %s)", owner, row.Fence, left)
}

func (a *app) command(path string, o execOpts, foreground bool, env ...string) *exec.Cmd {
	cmd := exec.Command(path, o.argv[1:]...)
	cmd.Args[0] = o.argv[0]
	// A pgfence exec inside another must not pass the outer lease's
	// variables on as if they were its own (with --fail-open it sets none).
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "PGFENCE_KEY", "PGFENCE_FENCE", "PGFENCE_OWNER", "PGFENCE_FAIL_OPEN", "PGFENCE_SLOT", "PGFENCE_FENCES":
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = procAttr(foreground)
	return cmd
}

// job is the running command: the leader of its own process group, waited
// for with wait4(WUNTRACED) so that its stops are seen too.
type job struct {
	a    *app
	name string
	pgid int
	// tty: the command's group was made the terminal's foreground group
	// (stdin is a terminal whose foreground group was pgfence's own).
	tty    bool
	events chan syscall.WaitStatus // stops, then the exit; closed after it
	// cont and tstp receive pgfence's own SIGCONT and SIGTSTP (nil
	// without catchStops).
	cont, tstp chan os.Signal
	ownStop    bool // suspend sent the group SIGSTOP: its stop is not news
	// fgPoll ticks while stdin is a terminal: bash's fg sends no SIGCONT
	// to a job that runs, so pgfence looks whether its group got the
	// terminal (see watchTerminal).
	fgPoll *time.Ticker
	done   bool // the command has exited
}

// startJob starts the command and maps a start failure to 126/127.
func (a *app) startJob(path string, o execOpts, env ...string) (*job, error) {
	fg := takeForeground()
	before := foregroundGroup()
	cmd := a.command(path, o, fg, env...)
	// pgfence's own SIGCONT and SIGTSTP are caught before the start, so
	// that a Ctrl-Z typed the moment the command starts cannot stop pgfence
	// alone (the default action) while the command runs on unrenewed. The
	// child does not inherit them: a caught signal is reset at exec.
	var cont, tstp chan os.Signal
	if catchStops {
		cont, tstp = make(chan os.Signal, 1), make(chan os.Signal, 1)
		signal.Notify(cont, syscall.SIGCONT)
		signal.Notify(tstp, syscall.SIGTSTP)
	}
	if err := cmd.Start(); err != nil {
		if catchStops {
			signal.Stop(cont)
			signal.Stop(tstp)
		}
		if fg {
			// The child made its group the foreground group before its
			// execve failed (ENOEXEC, say): that group is gone now, and a
			// launcher without job control would be left without the
			// terminal. Take it back for pgfence's group.
			restoreTerminal(before)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fail(exitNotFound, "pgfence: %s: command not found", o.argv[0])
		}
		return nil, fail(exitCannotExec, "pgfence: %s: cannot run: %v", o.argv[0], err)
	}
	j := &job{a: a, name: o.argv[0], pgid: cmd.Process.Pid, tty: fg, events: make(chan syscall.WaitStatus, 4), cont: cont, tstp: tstp}
	if fg {
		// pgfence is now in a background group of its terminal: writing
		// to it (with TOSTOP) or taking it back must not stop pgfence.
		// Ignored only after the start: the command must not inherit it.
		signal.Ignore(syscall.SIGTTOU)
	}
	if catchStops && stdinTerminal() {
		j.fgPoll = time.NewTicker(200 * time.Millisecond)
	}
	cmd.Process.Release() // waited for by pid below
	go func() {
		defer close(j.events)
		for {
			var ws syscall.WaitStatus
			_, err := syscall.Wait4(j.pgid, &ws, syscall.WUNTRACED, nil)
			if err == syscall.EINTR {
				continue
			}
			if err != nil { // cannot happen for our own child; end as if killed
				ws = syscall.WaitStatus(syscall.SIGKILL)
			}
			j.events <- ws
			if !ws.Stopped() {
				return
			}
		}
	}()
	return j, nil
}

// ended gives the terminal back to pgfence's group if the command's group
// still has it, and undoes startJob's signal setting.
func (j *job) ended() {
	j.done = true
	if j.tty {
		giveTerminal(j.pgid, syscall.Getpgrp())
		signal.Reset(syscall.SIGTTOU)
	}
}

// stopCatching undoes startJob's catching of SIGCONT and SIGTSTP.
func (j *job) stopCatching() {
	if j.cont != nil {
		signal.Stop(j.cont)
		signal.Stop(j.tstp)
	}
	if j.fgPoll != nil {
		j.fgPoll.Stop()
	}
}

// pollC is the channel of fgPoll, nil without it.
func (j *job) pollC() <-chan time.Time {
	if j.fgPoll == nil {
		return nil
	}
	return j.fgPoll.C
}

// watchTerminal gives the command's group the terminal when pgfence's
// group has it: fg of pgfence started with & (bash sends no SIGCONT to a
// running job) leaves it there.
func (j *job) watchTerminal(canGo func() bool) {
	if !j.done && foregroundGroup() == syscall.Getpgrp() && canGo() && takeForeground() {
		j.handTerminal()
	}
}

// handTerminal makes the command's group the terminal's foreground group
// if pgfence's group has it (pgfence then ignores SIGTTOU: it is in the
// background).
func (j *job) handTerminal() {
	giveTerminal(syscall.Getpgrp(), j.pgid)
	if !j.tty {
		j.tty = true
		signal.Ignore(syscall.SIGTTOU)
	}
}

// continued handles SIGCONT to pgfence: fg or bg after a stop, or fg of
// pgfence started with &. Unless the lease may be gone (canGo false: the
// loss is handled first), the command's group is continued, and given the
// terminal when pgfence's group has it (fg), as a shell does for a job:
// otherwise it would stay in the background, Ctrl-Z would stop pgfence
// alone and the command would run on without renewals.
func (j *job) continued(canGo func() bool) {
	if !canGo() {
		return
	}
	if !j.done && takeForeground() {
		j.handTerminal()
	}
	syscall.Kill(-j.pgid, syscall.SIGCONT)
}

// suspend handles SIGTSTP to pgfence: Ctrl-Z while pgfence's group has the
// terminal and the command's does not (before continued gave it, or in a
// pipeline), or a kill -TSTP. The command's group is stopped first, with
// SIGSTOP: it is in the background, so it has no terminal state to restore
// on SIGTSTP, and it must not be able to ignore the stop, since renewals
// stop with pgfence. Then pgfence stops itself; continued runs when it is
// continued. If pgfence's own stop is discarded (orphaned group), the
// command goes on at once.
func (j *job) suspend() {
	j.ownStop = true
	syscall.Kill(-j.pgid, syscall.SIGSTOP)
	if !suspendSelf() {
		j.ownStop = false
		syscall.Kill(-j.pgid, syscall.SIGCONT)
	}
}

// forward sends s to the command's group, then SIGCONT: a stopped group
// would otherwise not act on it.
func (j *job) forward(s syscall.Signal) {
	syscall.Kill(-j.pgid, s)
	syscall.Kill(-j.pgid, syscall.SIGCONT)
}

// stopped handles the command stopping. A job-control stop (SIGTSTP:
// Ctrl-Z reached the command's foreground group; SIGTTIN/SIGTTOU: it used
// the terminal from the background) with a terminal on stdin is passed on
// as a shell expects of a job: pgfence takes the terminal back and stops
// itself; when continued (fg or bg) it continues the command, giving it the
// terminal again if pgfence has it, unless the lease may be gone (canGo
// false): then the loss is handled first. Otherwise (no terminal, or
// pgfence shares its group, as in a pipeline) it only says so: the
// lease stays held and renewed while the command is stopped.
func (j *job) stopped(sig syscall.Signal, canGo func() bool) {
	if sig == syscall.SIGSTOP && j.ownStop {
		j.ownStop = false // suspend's own stop
		return
	}
	jobControl := sig == syscall.SIGTSTP || sig == syscall.SIGTTIN || sig == syscall.SIGTTOU
	if !jobControl || !stdinTerminal() || !aloneInGroup() {
		fmt.Fprintf(j.a.stderr, "pgfence: %s (process group %d) stopped by %v; the lease stays held and renewed (SIGCONT continues it; SIGTERM to pgfence ends it)\n", j.name, j.pgid, sig)
		return
	}
	if sig != syscall.SIGTSTP && takeForeground() && canGo() {
		// It needs the terminal, and pgfence's group has it (fg of
		// pgfence started with &): hand it on rather than stop.
		j.handTerminal()
		syscall.Kill(-j.pgid, syscall.SIGCONT)
		return
	}
	if j.tty {
		giveTerminal(j.pgid, syscall.Getpgrp())
	}
	suspendSelf() // discarded if pgfence's group is orphaned, as the terminal's would be
	if !canGo() {
		return
	}
	if takeForeground() { // fg: the shell gave pgfence's group the terminal
		j.handTerminal()
	} else if sig != syscall.SIGTSTP {
		// Still no terminal: continued, it would stop again at once.
		fmt.Fprintf(j.a.stderr, "pgfence: %s (process group %d) stopped by %v: it needs the terminal; the lease stays held and renewed (bring pgfence to the foreground, or SIGTERM it)\n", j.name, j.pgid, sig)
		return
	}
	syscall.Kill(-j.pgid, syscall.SIGCONT)
}

// wsStatus is the shell's view of how the command ended.
func wsStatus(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// exitStatus is the shell's view of how cmd ended.
func exitStatus(state *os.ProcessState) int {
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return state.ExitCode()
}

func (a *app) runUnprotected(path string, o execOpts, sigCh chan os.Signal) int {
	j, err := a.startJob(path, o, "PGFENCE_KEY="+o.key, "PGFENCE_FAIL_OPEN=1")
	if err != nil {
		return a.exitCode(err)
	}
	defer j.stopCatching()
	for {
		select {
		case s := <-sigCh:
			j.forward(s.(syscall.Signal))
		case <-j.tstp:
			j.suspend()
		case <-j.cont:
			j.continued(func() bool { return true })
		case <-j.pollC():
			j.watchTerminal(func() bool { return true })
		case ws := <-j.events:
			if ws.Stopped() {
				j.stopped(ws.StopSignal(), func() bool { return true })
				continue
			}
			j.ended()
			return wsStatus(ws)
		}
	}
}

func (a *app) runHolding(path string, o execOpts, lease held, owner string, sigCh chan os.Signal) int {
	j, err := a.startJob(path, o, append([]string{
		"PGFENCE_KEY=" + o.key,
		"PGFENCE_FENCE=" + strconv.FormatInt(lease.Fence(), 10),
		"PGFENCE_OWNER=" + owner}, lease.env()...)...)
	if err != nil {
		a.release(lease)
		return a.exitCode(err)
	}
	defer j.stopCatching()
	h := &holding{a: a, o: o, j: j, lease: lease, leaseDone: lease.Context().Done(), events: j.events}
	defer h.stopPoll()
	for h.waiting() {
		h.step(sigCh)
	}
	h.killLeftovers()
	return a.finishHolding(o.argv[0], o.key, h.status, h.lost, lease)
}

// holding is the wait loop of a command run under a lease, and what it has
// seen so far.
type holding struct {
	a     *app
	o     execOpts
	j     *job
	lease held

	leaseDone <-chan struct{}           // the lease's end; nil once the loss is handled
	events    <-chan syscall.WaitStatus // the command's stops and exit; nil after the exit
	lost      error                     // the loss, once seen
	status    int                       // the command's exit status, once exited
	exited    bool                      // the direct child has exited; its group may live on
	signalled bool                      // a signal was forwarded: the command is being stopped
	kill      <-chan time.Time          // SIGKILL for the whole group: --grace after a loss or a forwarded signal
	killed    bool
	poll      *time.Ticker // while the group outlives the direct child
}

// waiting reports whether the loop goes on. Once the direct child is gone,
// after a loss or a forwarded signal whatever is left of its group gets the
// rest of the grace, then SIGKILL: nothing of the command may outlive the
// grace after a loss (and, after a signal, the lease is held until it is
// gone). The group is polled meanwhile.
func (h *holding) waiting() bool {
	if !h.exited {
		return true
	}
	if h.killed || !groupRunning(h.j.pgid) || (h.lost == nil && !h.signalled) {
		return false
	}
	if h.kill == nil {
		h.kill = time.After(h.o.grace)
	}
	if h.poll == nil {
		h.poll = time.NewTicker(50 * time.Millisecond)
	}
	return true
}

// step waits for the next event and handles it.
func (h *holding) step(sigCh <-chan os.Signal) {
	j := h.j
	select {
	case s := <-sigCh:
		h.signalled = true
		j.forward(s.(syscall.Signal))
	case <-h.leaseDone:
		h.onLoss()
	case <-j.tstp:
		if h.lost == nil { // after a loss, nothing delays the SIGKILL
			j.suspend()
		}
	case <-j.cont:
		j.continued(h.canGo)
	case <-j.pollC():
		j.watchTerminal(h.canGo)
	case <-h.kill:
		h.killGroup()
	case <-h.pollC():
	case ws := <-h.events:
		h.onWait(ws)
	}
}

// canGo reports whether the command may run on: the lease is neither lost
// nor past its local deadline (pgfence was stopped; the timer that ends
// the lease may not have run yet).
func (h *holding) canGo() bool {
	return h.lost == nil && h.lease.Err() == nil && time.Now().Before(h.lease.Deadline())
}

// onLoss stops the command's group: SIGTERM now, SIGKILL after --grace.
func (h *holding) onLoss() {
	h.leaseDone = nil
	h.lost = h.lease.Err()
	fmt.Fprintf(h.a.stderr, "pgfence: LEASE LOST on %q (fence %d): %v\npgfence: sending SIGTERM to %s (process group %d); SIGKILL in %v if it has not exited\n",
		h.o.key, h.lease.Fence(), h.lost, h.o.argv[0], h.j.pgid, h.o.grace)
	h.j.forward(syscall.SIGTERM)
	if h.kill == nil && !h.killed {
		h.kill = time.After(h.o.grace)
	}
}

// killGroup sends SIGKILL to the group once the grace has run out.
func (h *holding) killGroup() {
	h.kill = nil
	h.killed = true
	fmt.Fprintf(h.a.stderr, "pgfence: %s (process group %d) still running %v after SIGTERM: sending SIGKILL\n", h.o.argv[0], h.j.pgid, h.o.grace)
	syscall.Kill(-h.j.pgid, syscall.SIGKILL)
	waitGroupGone(h.j.pgid, 2*time.Second)
}

// onWait handles a stop or the exit of the command.
func (h *holding) onWait(ws syscall.WaitStatus) {
	if ws.Stopped() {
		if h.lost == nil {
			h.j.stopped(ws.StopSignal(), h.canGo)
		}
		return
	}
	h.events = nil
	h.exited = true
	h.status = wsStatus(ws)
	h.j.ended()
	// The loss and the exit may have been ready at once, and select picked
	// the exit: the loss still counts, and what is left of the group gets
	// the loss's treatment.
	if h.leaseDone != nil && h.lease.Err() != nil {
		h.onLoss()
	}
}

func (h *holding) pollC() <-chan time.Time {
	if h.poll == nil {
		return nil
	}
	return h.poll.C
}

func (h *holding) stopPoll() {
	if h.poll != nil {
		h.poll.Stop()
	}
}

// killLeftovers ends what is left of the group after the loop: after a
// loss or a forwarded signal, SIGKILL to any member (zombies, or a process
// that /proc shows as one while a thread of it runs: harmless to zombies,
// and nothing may run on without the lease); after a plain exit, a warning
// that members run on without the lease.
func (h *holding) killLeftovers() {
	pgid := h.j.pgid
	if (h.lost != nil || h.signalled) && !h.killed && groupHasMembers(pgid) {
		syscall.Kill(-pgid, syscall.SIGKILL)
	}
	if h.lost == nil && groupRunning(pgid) {
		fmt.Fprintf(h.a.stderr, "pgfence: warning: processes of %s's group %d still run after it exited; they run without the lease\n", h.o.argv[0], pgid)
	}
}

// heldLease is what finishHolding needs of a lease: Err is the cause of
// its context (nil while held).
type heldLease interface {
	Err() error
	Release(ctx context.Context) error
}

// finishHolding decides pgfence's exit once the command has ended with
// status: 83 if the lease was lost (seen by the wait loop, lost != nil, or
// ended meanwhile: the lease's context says so even when the wait loop saw
// the command's exit first and the database cannot be reached to release),
// else the command's status after releasing the lease.
func (a *app) finishHolding(name, key string, status int, lost error, lease heldLease) int {
	if lost == nil {
		if err := lease.Err(); err != nil && errors.Is(err, pgf.ErrLeaseLost) {
			fmt.Fprintf(a.stderr, "pgfence: %s exited with %d, but the lease on %q was lost: %v; exit %d\n", name, status, key, err, exitLeaseLost)
			return exitLeaseLost
		}
	}
	if lost != nil {
		fmt.Fprintf(a.stderr, "pgfence: %s was stopped (status %d) because the lease on %q was lost; exit %d\n", name, status, key, exitLeaseLost)
		return exitLeaseLost
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := lease.Release(ctx); err != nil {
		if errors.Is(err, pgf.ErrLeaseLost) {
			fmt.Fprintf(a.stderr, "pgfence: %s exited with %d, but the lease on %q had been lost before it ended: %v; exit %d\n", name, status, key, err, exitLeaseLost)
			return exitLeaseLost
		}
		fmt.Fprintf(a.stderr, "pgfence: warning: %v\n", err)
	}
	return status
}

// waitGroupGone waits up to limit for process group pgid to have no
// running member (after SIGKILL: until the kernel has ended them).
func waitGroupGone(pgid int, limit time.Duration) {
	for end := time.Now().Add(limit); groupRunning(pgid) && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
}

func (a *app) release(lease heldLease) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return lease.Release(ctx)
}
