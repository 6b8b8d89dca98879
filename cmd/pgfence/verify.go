package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	pgf "github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/cmd/pgfence/internal/dsn"
	"github.com/pgfence/pgfence/internal/pgdb"
	"github.com/pgfence/pgfence/internal/pgerr"
	"github.com/pgfence/pgfence/internal/validate"
	"github.com/pgfence/pgfence/pglease"
)

const verifyUsage = `Usage: pgfence verify [--processes 3] [--goroutines 4] [--keys 4] [--duration 5s]
                      [--ttl 10s] [--hold 1ms] [--json] [--keep]

Runs a short contended workload of pgfence leases through your own database
settings (your pooler, your HA setup, your pgfence schema) and checks it on
the database's own record. It starts --processes worker processes (copies
of pgfence itself, which die with it), each running --goroutines holders
that take the leases of --keys random keys for --duration, waiting in turn
as pgfence exec --wait does (woken on release; behind a transaction pooler,
where LISTEN hears nothing, by polling). Under each lease a holder writes an
audit row (key, fence, owner, a unique write id, its start and its end by
the database's clock), makes one fenced write to the key's resource row
(UPDATE ... SET last_fence = $fence WHERE ... AND last_fence <= $fence),
waits --hold, and releases. Then it checks:
  workload      holds were recorded (a check of nothing proves nothing)
  overlap       no two holders of one key overlapped in time (database clock)
  fence order   each key's fences rose in the order its holders were granted
  acked writes  every acknowledged audit write is there, and each resource
                row's last_fence is its highest acknowledged fenced write
  fenced writes no holder's fenced write was refused (a newer fence had
                written while it still held the key)
The TTL is far longer than a hold, so no lease runs out while held: any
overlap is a fault of the setup (a pooler or failover that lost a grant or
a release, a broken schema), not the TTL doing its job.

The audit and resource tables live in a scratch schema verify creates
(pgfence_verify_<random>; the role needs CREATE on the database) and drops
at the end, also when interrupted (not when verify is killed outright: then
drop it yourself); --keep leaves it for inspection. The lease rows of the
run's keys (pgfence-verify/<run>/<n>) stay, released; pglease's
SweepExpired removes them.

Prints the grants, grants per second, the acquire latency (p50, p99), the
hand-off (a holder's last write to the next holder's first on its key, by
the database's clock: the release and the grant lie in between) and PASS or
FAIL with what failed. --json prints one object.

Exit codes:
  0   PASS: every check held
  1   FAIL: a check failed (or the run could not be completed; the message says why)
  80  usage: bad flag or argument, malformed URL
  84  the database is unreachable
  85  the database refused: pgfence's schema is missing (run pgfence migrate up),
      login or permission denied (verify needs CREATE on the database)
  130 interrupted (Ctrl-C); the workers were stopped and the scratch schema dropped
`

// verifyWorkerArg starts the process as one of verify's workers, which
// takes its settings on stdin from the verify that started it.
const verifyWorkerArg = "--worker"

// verifyOpts are verify's flags.
type verifyOpts struct {
	url                         string
	processes, goroutines, keys int
	duration, ttl, hold         time.Duration
	asJSON, keep                bool
}

// Bounds of verify's flags: a short check, not a benchmark.
const (
	verifyMaxProcesses  = 64
	verifyMaxGoroutines = 256
	verifyMaxKeys       = 10000
	verifyMaxDuration   = 10 * time.Minute
	// verifyTTLPerHold is how many holds fit in one TTL at least: a lease
	// must never run out while its holder holds it, or an overlap would be
	// the TTL doing its job rather than a fault.
	verifyTTLPerHold = 20
)

func (a *app) cmdVerify(ctx context.Context, args []string) int {
	if len(args) == 1 && args[0] == verifyWorkerArg {
		return a.verifyWorker(ctx)
	}
	var o verifyOpts
	fs := a.newFlags("verify", verifyUsage, &o.url)
	fs.IntVar(&o.processes, "processes", 3, "start `N` worker processes")
	fs.IntVar(&o.goroutines, "goroutines", 4, "`N` lease holders (goroutines) per process")
	fs.IntVar(&o.keys, "keys", 4, "`N` keys the holders contend on")
	durVar(fs, &o.duration, "duration", 5*time.Second, "how long the workload runs, a `duration`")
	durVar(fs, &o.ttl, "ttl", 10*time.Second, "lease TTL, a `duration`; at least 1s and 20 times --hold")
	durVar(fs, &o.hold, "hold", time.Millisecond, "extra time each holder keeps the lease, a `duration`")
	fs.BoolVar(&o.asJSON, "json", false, "print one JSON object")
	fs.BoolVar(&o.keep, "keep", false, "keep the scratch schema with the audit rows (its name is printed)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return a.exitCode(err)
	}
	if len(pos) > 0 {
		return a.exitCode(fail(exitUsage, "pgfence verify: unexpected argument %q (verify takes flags only; see pgfence verify -h)", pos[0]))
	}
	if err := o.check(); err != nil {
		return a.exitCode(err)
	}
	return a.verify(ctx, o)
}

func (o *verifyOpts) check() error {
	switch {
	case o.processes < 1 || o.processes > verifyMaxProcesses:
		return fail(exitUsage, "pgfence verify: --processes %d is outside [1, %d]", o.processes, verifyMaxProcesses)
	case o.goroutines < 1 || o.goroutines > verifyMaxGoroutines:
		return fail(exitUsage, "pgfence verify: --goroutines %d is outside [1, %d]", o.goroutines, verifyMaxGoroutines)
	case o.keys < 1 || o.keys > verifyMaxKeys:
		return fail(exitUsage, "pgfence verify: --keys %d is outside [1, %d]", o.keys, verifyMaxKeys)
	case o.duration < 100*time.Millisecond || o.duration > verifyMaxDuration:
		return fail(exitUsage, "pgfence verify: --duration %v is outside [100ms, %v]", o.duration, verifyMaxDuration)
	case o.ttl < time.Second || o.ttl > validate.MaxTTL:
		return fail(exitUsage, "pgfence verify: --ttl %v is outside [1s, %v]", o.ttl, validate.MaxTTL)
	case o.hold*verifyTTLPerHold > o.ttl:
		return fail(exitUsage, "pgfence verify: --ttl %v must be at least %d times --hold %v, so that no lease runs out while held: "+
			"raise --ttl to %v or shorten --hold", o.ttl, verifyTTLPerHold, o.hold, o.hold*verifyTTLPerHold)
	}
	return nil
}

// verifyRun names one run's objects: its lease keys and its scratch schema.
type verifyRun struct {
	id      string
	scratch string // the scratch schema's name, unquoted
}

func newVerifyRun() verifyRun {
	var b [5]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	return verifyRun{id: id, scratch: "pgfence_verify_" + id}
}

func verifyKey(run string, k int) string { return fmt.Sprintf("pgfence-verify/%s/%d", run, k) }

// verifySQL are the statements on a run's scratch tables.
type verifySQL struct {
	create                        []string
	insert, fenced, end           string
	readAudit, readResource, drop string
}

func newVerifySQL(scratch string, keys int) verifySQL {
	s := pgx.Identifier{scratch}.Sanitize()
	return verifySQL{
		create: []string{
			"CREATE SCHEMA " + s,
			"CREATE TABLE " + s + ".audit (write_id text PRIMARY KEY, key int NOT NULL, fence bigint NOT NULL, owner text NOT NULL, " +
				"started_at timestamptz NOT NULL, ended_at timestamptz)",
			"CREATE TABLE " + s + ".resource (key int PRIMARY KEY, last_fence bigint NOT NULL DEFAULT 0, writes bigint NOT NULL DEFAULT 0)",
			fmt.Sprintf("INSERT INTO %s.resource (key) SELECT generate_series(0, %d)", s, keys-1),
		},
		insert:       "INSERT INTO " + s + ".audit (write_id, key, fence, owner, started_at) VALUES ($1, $2, $3, $4, clock_timestamp())",
		fenced:       "UPDATE " + s + ".resource SET last_fence = $2, writes = writes + 1 WHERE key = $1 AND last_fence <= $2",
		end:          "UPDATE " + s + ".audit SET ended_at = clock_timestamp() WHERE write_id = $1",
		readAudit:    "SELECT write_id, key, fence, owner, started_at, ended_at FROM " + s + ".audit",
		readResource: "SELECT key, last_fence, writes FROM " + s + ".resource ORDER BY key",
		drop:         "DROP SCHEMA IF EXISTS " + s + " CASCADE",
	}
}

// verifyClient is the lease client of verify's parent and workers: the
// waiting of pgfence exec --wait (a queue kept by the database), in the
// chosen schema, woken on release when wake is set.
func (a *app) verifyClient(pool *pgxpool.Pool, wake bool) (*pglease.Client, error) {
	logger := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts := []pglease.Option{pglease.WithLogger(logger), pglease.WithFairWaiting()}
	if wake {
		opts = append(opts, pglease.WithWakeOnRelease())
	}
	if s := a.schemaName(); s != "" {
		opts = append(opts, pglease.WithSchema(s))
	}
	return pglease.New(pool, opts...)
}

// wakeUps tells whether waiters can be woken on release: LISTEN needs a
// server session of its own, which a transaction pooler does not keep.
// Behind one, a waiter that listens would hear nothing and only refresh
// its place now and then, so verify's waiters poll instead, as a client
// behind a pooler should.
func wakeUps(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Release()
	behind, err := pgdb.BehindPooler(ctx, conn.Conn())
	return !behind, err
}

// workerConfig is what verify sends a worker on its stdin.
type workerConfig struct {
	Run        string        `json:"run"`
	Scratch    string        `json:"scratch"`
	Worker     int           `json:"worker"`
	Goroutines int           `json:"goroutines"`
	Keys       int           `json:"keys"`
	Duration   time.Duration `json:"duration"`
	TTL        time.Duration `json:"ttl"`
	Hold       time.Duration `json:"hold"`
	Wake       bool          `json:"wake"`
}

func (a *app) verify(ctx context.Context, o verifyOpts) int {
	sigCh := make(chan os.Signal, 1)
	signal.Notify(sigCh, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigCh)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan os.Signal, 1)
	go func() {
		select {
		case s := <-sigCh:
			got <- s
			cancel()
		case <-ctx.Done():
		}
	}()
	code := a.verifyRun(ctx, o)
	select {
	case s := <-got:
		fmt.Fprintf(a.stderr, "pgfence verify: interrupted by %v: the workers were stopped, no verdict was made\n", s)
		return 128 + int(s.(syscall.Signal))
	default:
	}
	return code
}

func (a *app) verifyRun(ctx context.Context, o verifyOpts) int {
	pool, where, err := a.connect(ctx, o.url)
	if err != nil {
		return a.exitCode(err)
	}
	defer pool.Close()
	run := newVerifyRun()
	q := newVerifySQL(run.scratch, o.keys)
	db := pgdb.Wrap(pool, "")

	wake, err := wakeUps(ctx, pool)
	if err != nil {
		return a.exitCode(dbError(where, err))
	}
	// One grant first, so that a missing schema or a refused permission is
	// told here, with what to do, rather than by every worker.
	client, err := a.verifyClient(pool, wake)
	if err != nil {
		return a.exitCode(fail(exitUsage, "pgfence verify: %v", err))
	}
	probe, err := client.TryAcquire(ctx, verifyKey(run.id, 0), o.ttl)
	if err == nil {
		// A lease lost already is for the checks to judge: the server
		// answered.
		if err = probe.Release(ctx); errors.Is(err, pgf.ErrLeaseLost) {
			err = nil
		}
	}
	client.Close()
	if err != nil {
		if ctx.Err() != nil {
			return exitFailed
		}
		return a.exitCode(dbError(where, err))
	}

	for _, stmt := range q.create {
		if _, err := db.Exec(ctx, stmt); err != nil {
			a.dropScratch(db, q, run)
			if pgerr.Is(err, "42501") { // insufficient_privilege
				return a.exitCode(fail(exitDBError, "pgfence verify: database %s: %v: verify keeps its audit rows in a scratch schema of its own; "+
					"grant the role CREATE on the database (GRANT CREATE ON DATABASE ... TO ...) or run verify as a role that has it", where, err))
			}
			if ctx.Err() != nil {
				return exitFailed
			}
			return a.exitCode(dbError(where, err))
		}
	}
	if o.keep {
		defer fmt.Fprintf(a.stderr, "pgfence verify: the audit rows are kept in schema %s (tables audit and resource); drop it with DROP SCHEMA %s CASCADE\n",
			run.scratch, pgx.Identifier{run.scratch}.Sanitize())
	} else {
		defer a.dropScratch(db, q, run)
	}
	if !o.asJSON {
		fmt.Fprintf(a.stdout, "pgfence verify: %d processes x %d goroutines on %d keys for %v (TTL %v, hold %v)\n  through %s\n  waiters %s\n",
			o.processes, o.goroutines, o.keys, o.duration, o.ttl, o.hold, where, waitersWord(wake))
	}

	reports, err := a.runWorkers(ctx, o, run, wake)
	if err != nil {
		return a.exitCode(err)
	}

	rctx, rcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer rcancel()
	audit, resource, err := readRecord(rctx, db, q)
	if err != nil {
		return a.exitCode(dbError(where, fmt.Errorf("reading the audit record: %w", err)))
	}
	res := judge(o, reports, audit, resource)
	res.Database = where
	res.Scratch = run.scratch
	res.Run = run.id
	res.Waiters = waitersWord(wake)
	if o.asJSON {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		enc.Encode(res)
	} else {
		res.print(a.stdout)
	}
	if !res.Pass {
		return exitFailed
	}
	return exitOK
}

func waitersWord(wake bool) string {
	if wake {
		return "woken on release (LISTEN)"
	}
	return "polling (a transaction pooler is in between: LISTEN would hear nothing)"
}

// dropScratch drops the run's scratch schema, on a context of its own: it
// runs after an interrupt too.
func (a *app) dropScratch(db pgdb.DB, q verifySQL, run verifyRun) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := db.Exec(ctx, q.drop); err != nil {
		fmt.Fprintf(a.stderr, "pgfence verify: could not drop the scratch schema %s: %v; drop it yourself: DROP SCHEMA %s CASCADE\n",
			run.scratch, err, pgx.Identifier{run.scratch}.Sanitize())
	}
}

// auditRow is one holder's row in the audit table.
type auditRow struct {
	id      string
	key     int
	fence   int64
	owner   string
	started time.Time
	ended   *time.Time
}

// resourceRow is one key's fenced resource row.
type resourceRow struct {
	key       int
	lastFence int64
	writes    int64
}

func readRecord(ctx context.Context, db pgdb.DB, q verifySQL) ([]auditRow, []resourceRow, error) {
	rows, err := db.Query(ctx, q.readAudit)
	if err != nil {
		return nil, nil, err
	}
	var audit []auditRow
	for rows.Next() {
		var r auditRow
		if err := rows.Scan(&r.id, &r.key, &r.fence, &r.owner, &r.started, &r.ended); err != nil {
			rows.Close()
			return nil, nil, err
		}
		audit = append(audit, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	rows, err = db.Query(ctx, q.readResource)
	if err != nil {
		return nil, nil, err
	}
	var resource []resourceRow
	for rows.Next() {
		var r resourceRow
		if err := rows.Scan(&r.key, &r.lastFence, &r.writes); err != nil {
			rows.Close()
			return nil, nil, err
		}
		resource = append(resource, r)
	}
	rows.Close()
	return audit, resource, rows.Err()
}

// worker is one worker process as verify sees it.
type worker struct {
	n      int
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan []byte   // what it wrote on its report pipe, line by line
	exited chan struct{} // closed once it exited; then code is set
	code   int
}

// runWorkers starts the worker processes, lets them go together once each
// is connected, and collects their reports. Each worker stops when its
// stdin closes, which happens at the latest when this process dies; on
// Linux the kernel also kills it then.
func (a *app) runWorkers(ctx context.Context, o verifyOpts, run verifyRun, wake bool) ([]workerReport, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fail(exitFailed, "pgfence verify: cannot find pgfence's own executable to start the workers: %v", err)
	}
	url := o.url
	if url == "" {
		url = a.globalURL
	}
	raw, _ := dsn.Resolve(url)
	env := append(os.Environ(), "PGFENCE_SCHEMA="+a.schemaName())
	if raw != "" {
		// Passed in the environment, never in the arguments, which any
		// user of the machine can read.
		env = append(env, "PGFENCE_DATABASE_URL="+raw)
	}
	var workers []*worker
	defer func() { stopWorkers(workers) }()
	for i := range o.processes {
		w, err := a.startWorker(self, env, i)
		if err != nil {
			return nil, fail(exitFailed, "pgfence verify: starting worker %d: %v", i, err)
		}
		workers = append(workers, w)
		cfg := workerConfig{Run: run.id, Scratch: run.scratch, Worker: i, Goroutines: o.goroutines, Keys: o.keys,
			Duration: o.duration, TTL: o.ttl, Hold: o.hold, Wake: wake}
		b, _ := json.Marshal(cfg)
		if _, err := w.stdin.Write(append(b, '\n')); err != nil {
			return nil, w.failure(ctx, err)
		}
	}
	ready := time.NewTimer(time.Minute)
	defer ready.Stop()
	for _, w := range workers {
		if _, err := w.next(ctx, ready.C, "ready"); err != nil {
			return nil, err
		}
	}
	for _, w := range workers {
		if _, err := io.WriteString(w.stdin, "go\n"); err != nil {
			return nil, w.failure(ctx, err)
		}
	}
	// A holder's statements end with its lease (within the TTL), the
	// release and the client's Close within seconds more.
	done := time.NewTimer(o.duration + o.ttl + time.Minute)
	defer done.Stop()
	reports := make([]workerReport, len(workers))
	for i, w := range workers {
		line, err := w.next(ctx, done.C, "report")
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(line, &reports[i]); err != nil {
			return nil, fail(exitFailed, "pgfence verify: worker %d sent a report that does not parse: %v", w.n, err)
		}
	}
	return reports, nil
}

func (a *app) startWorker(self string, env []string, n int) (*worker, error) {
	cmd := exec.Command(self, "verify", verifyWorkerArg)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = a.stderr, a.stderr
	// Its own process group: Ctrl-C reaches verify alone, which stops the
	// workers in order (their leases released) and drops the scratch schema.
	cmd.SysProcAttr = procAttr(false)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.ExtraFiles = []*os.File{pw}
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return nil, err
	}
	pw.Close()
	w := &worker{n: n, cmd: cmd, stdin: stdin, lines: make(chan []byte, 2), exited: make(chan struct{})}
	go func() {
		br := bufio.NewReader(pr)
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 && err == nil {
				w.lines <- line[:len(line)-1]
			}
			if err != nil {
				break
			}
		}
		pr.Close()
		close(w.lines)
		cmd.Wait()
		w.code = exitStatus(cmd.ProcessState)
		close(w.exited)
	}()
	return w, nil
}

// next waits for the worker's next line, which should be a (the "ready"
// line itself, or a report).
func (w *worker) next(ctx context.Context, timeout <-chan time.Time, what string) ([]byte, error) {
	select {
	case line, ok := <-w.lines:
		if !ok {
			return nil, w.failure(ctx, nil)
		}
		if what == "ready" && string(line) != "ready" {
			return nil, fail(exitFailed, "pgfence verify: worker %d said %q instead of ready", w.n, line)
		}
		return line, nil
	case <-timeout:
		return nil, fail(exitFailed, "pgfence verify: worker %d sent no %s in time; its messages, if any, are above", w.n, what)
	case <-ctx.Done():
		return nil, fail(exitFailed, "")
	}
}

// failure is the error of a worker that stopped before it reported: its
// own exit code when that says usage, unreachable or refused (its message
// is already on stderr), else a failed run.
func (w *worker) failure(ctx context.Context, err error) error {
	select {
	case <-w.exited:
	case <-time.After(10 * time.Second):
	case <-ctx.Done():
		return fail(exitFailed, "")
	}
	switch w.code {
	case exitUsage, exitUnreachable, exitDBError:
		return &exitError{code: w.code}
	}
	if err != nil {
		return fail(exitFailed, "pgfence verify: worker %d: %v (exit %d; its messages, if any, are above)", w.n, err, w.code)
	}
	return fail(exitFailed, "pgfence verify: worker %d exited with code %d before it reported; its messages are above", w.n, w.code)
}

// stopWorkers closes each worker's stdin, which ends it (its leases
// released), and kills one that is still there after a while.
func stopWorkers(workers []*worker) {
	for _, w := range workers {
		w.stdin.Close()
	}
	limit := time.NewTimer(15 * time.Second)
	defer limit.Stop()
	late := false
	for _, w := range workers {
		if !late {
			select {
			case <-w.exited:
				continue
			case <-limit.C:
				late = true
			}
		}
		w.cmd.Process.Kill()
		<-w.exited
	}
}

// outcome is what became of one statement: ok (acknowledged), refused (the
// fenced write met a newer fence), failed (the server refused it with an
// ERROR, or it was never sent: not applied), unknown (no answer, or the
// session ended: it may have been applied), or "" (not tried).
type outcome string

const (
	outOK      outcome = "ok"
	outRefused outcome = "refused"
	outFailed  outcome = "failed"
	outUnknown outcome = "unknown"
)

func outcomeOf(err error) outcome {
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return outOK
	case errors.As(err, &pgErr):
		// A single statement outside a transaction that the server
		// refused with an ERROR was rolled back. A FATAL one may come
		// after the commit: a backend terminated while it waited for a
		// synchronous standby says the transaction committed locally.
		if sev := cmp.Or(pgErr.SeverityUnlocalized, pgErr.Severity); sev == "ERROR" && !pgerr.IsUnavailable(err) {
			return outFailed
		}
		return outUnknown
	case pgdb.NotSent(err), pgconn.SafeToRetry(err):
		return outFailed // nothing was sent
	}
	return outUnknown
}

// trimErr shortens an error message for the report.
func trimErr(phase string, err error) string {
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	return phase + ": " + msg
}

// isCtxEnd tells an error that only says ctx ended.
func isCtxEnd(ctx context.Context, err error) bool {
	return ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ctx.Err()))
}
