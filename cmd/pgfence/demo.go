package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/internal/dbenv"
	"github.com/pgfence/pgfence/internal/dsn"
	"github.com/pgfence/pgfence/internal/proc"
	"github.com/pgfence/pgfence/migrations"
	"github.com/pgfence/pgfence/pgguard"
	"github.com/pgfence/pgfence/pglease"
)

const demoUsage = `Usage: pgfence demo [--database-url URL]

Replays the distributed-locks lesson with real workers, on a real PostgreSQL:
  1. three billing instances, each with its own lease client, compete for
     invoice:inv_72; one sends the invoice, the others skip;
  2. a worker (a separate pgfence process) takes the lease, is frozen with
     SIGSTOP past its TTL, and writes late: the fence at the resource (a
     pgguard guarded write) refuses the write, because a newer holder has
     written since;
  3. the same run without the fence: the invoice is sent twice.
It prints a timeline and a verdict, and exits 0 only if every check held.
Times are the lesson's divided by 30 (a 30 s lease is 1 s here).

Database: --database-url, PGFENCE_DATABASE_URL or DATABASE_URL; with none of
them (the PG* variables are not consulted), a throwaway PostgreSQL is started
from local binaries (or a Docker container) and removed on exit, Ctrl-C
included. On a database you name, the demo works in a schema of its own,
pgfence_demo_<random> (it needs CREATE on the database), and drops it on
exit.
`

const (
	demoKey    = "invoice:inv_72"
	demoJob    = "inv_72"
	demoTTL    = time.Second             // the lesson's 30 s, scaled
	demoFreeze = 1500 * time.Millisecond // the lesson's 45 s, scaled
)

// demoSchemaSQL creates the protected resource: the invoice job row with
// its fence column, and the log of invoices sent (what the customer sees).
const demoSchemaSQL = `
CREATE TABLE invoice_jobs (
  job_id     text   PRIMARY KEY,
  status     text   NOT NULL,
  last_fence bigint NOT NULL DEFAULT 0,
  sent_by    text
);
CREATE TABLE invoice_sends (
  id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  job_id  text   NOT NULL,
  worker  text   NOT NULL,
  fence   bigint NOT NULL
);`

// sendUnfenced is what a worker that trusts its lock does: it decided from
// what it read while it held the lease, and writes.
const sendUnfenced = `
WITH w AS (
  UPDATE invoice_jobs SET status = 'SENT', sent_by = $2
   WHERE job_id = $3
  RETURNING job_id)
INSERT INTO invoice_sends (job_id, worker, fence) SELECT job_id, $2, $1 FROM w`

// sendOutcome is what became of one attempt to send the invoice.
type sendOutcome struct {
	sent    bool
	refusal error // why the resource refused it (pgguard's error), if it did
	current int64 // the row's fence when a stale write was refused
}

// sendInvoice sends inv_72 as worker. Fenced, it is pgguard's guarded write
// (UPDATE ... SET status = 'SENT', last_fence = fence WHERE job_id = ... AND
// last_fence <= fence AND status = 'PENDING') with the send recorded in the
// same transaction, so the send happens only if the write counts. Unfenced,
// it is sendUnfenced.
func sendInvoice(ctx context.Context, db *pgxpool.Pool, fenced bool, worker string, fence int64) (sendOutcome, error) {
	if !fenced {
		tag, err := db.Exec(ctx, sendUnfenced, fence, worker, demoJob)
		return sendOutcome{sent: tag.RowsAffected() == 1}, err
	}
	guard, err := pgguard.NewGuard(ctx, db, pgguard.Table{Name: "invoice_jobs", KeyColumn: "job_id"})
	if err != nil {
		return sendOutcome{}, err
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return sendOutcome{}, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	err = guard.Update(ctx, tx, demoJob, fence, pgguard.Values{"status": "SENT", "sent_by": worker}, pgguard.Eq("status", "PENDING"))
	if stale, ok := pgguard.AsStaleFence(err); ok {
		return sendOutcome{refusal: err, current: stale.Current}, nil
	}
	if errors.Is(err, pgguard.ErrPrecondition) {
		return sendOutcome{refusal: err}, nil
	}
	if err != nil {
		return sendOutcome{}, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO invoice_sends (job_id, worker, fence) VALUES ($1, $2, $3)`, demoJob, worker, fence); err != nil {
		return sendOutcome{}, err
	}
	return sendOutcome{sent: true}, tx.Commit(ctx)
}

// demoEnv is the database the demo works in.
type demoEnv struct {
	url    string // connects with search_path = schema
	schema string
	admin  *pgxpool.Pool
}

func (e *demoEnv) pool(ctx context.Context) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(e.url)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = e.schema
	cfg.MaxConns = 3
	return pgxpool.NewWithConfig(ctx, cfg)
}

// timeline prints events with the time since the scene began.
type timeline struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

func (t *timeline) scene(title string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.w, "\n%s\n", title)
	t.start = time.Now()
}

func (t *timeline) log(who, format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.w, "  %+7.3fs  %-10s %s\n", time.Since(t.start).Seconds(), who, fmt.Sprintf(format, args...))
}

// check is one line of the verdict, computed from what happened.
type check struct {
	ok   bool
	what string
}

func (a *app) cmdDemo(ctx context.Context, args []string) error {
	var url string
	fs := a.newFlags("demo", demoUsage, &url)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fail(exitUsage, "pgfence demo: unexpected argument %q", pos[0])
	}
	if url == "" {
		url = a.globalURL
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	raw, src := dsn.Resolve(url)
	a.scrub.Add(dsn.Secrets(raw)...)
	where := ""
	throwaway := src == dsn.FromLibpqEnv
	if throwaway {
		srv, err := dbenv.Open(ctx, a.stderr)
		if err != nil {
			return fail(exitUnreachable, "%v", err)
		}
		defer func() {
			if err := srv.Close(); err != nil {
				fmt.Fprintf(a.stderr, "pgfence demo: removing the throwaway PostgreSQL: %v\n", err)
			} else {
				fmt.Fprintln(a.stderr, "pgfence demo: the throwaway PostgreSQL was stopped and removed")
			}
		}()
		raw = srv.URL
		where = "a throwaway PostgreSQL (" + srv.Source + ")"
	}
	cfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		return fail(exitUsage, "pgfence demo: the database URL from %s is malformed: %v", src, parseErrDetail(err))
	}
	a.scrub.Add(cfg.ConnConfig.Password)
	if where == "" {
		where = describe(cfg) + " (from " + string(src) + ")"
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	cfg.MaxConns = 2
	admin, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = admin.Ping(ctx)
	}
	if err != nil {
		return dbError(where, err)
	}
	defer admin.Close()

	var b [4]byte
	rand.Read(b[:])
	env := &demoEnv{url: raw, schema: "pgfence_demo_" + hex.EncodeToString(b[:]), admin: admin}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{env.schema}.Sanitize()); err != nil {
		return fail(exitDBError, "pgfence demo: cannot create the demo schema %s on %s (the role needs CREATE on the database): %v", env.schema, where, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		// On the throwaway server a failure does not matter (a Ctrl-C from a
		// terminal also stops the server, which is removed next).
		if _, err := admin.Exec(cctx, "DROP SCHEMA "+pgx.Identifier{env.schema}.Sanitize()+" CASCADE"); err != nil && !throwaway {
			fmt.Fprintf(a.stderr, "pgfence demo: could not drop the demo schema %s: %v (drop it by hand)\n", env.schema, err)
		}
	}()
	pool, err := env.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		return dbError(where, err)
	}
	if _, err := pool.Exec(ctx, demoSchemaSQL); err != nil {
		return dbError(where, err)
	}

	out := a.stdout
	fmt.Fprintf(out, "pgfence demo: the distributed-locks lesson, replayed with real workers\n")
	fmt.Fprintf(out, "database: %s; everything lives in schema %s, dropped on exit\n", where, env.schema)
	fmt.Fprintf(out, "times are the lesson's divided by 30: its 30 s lease is %v here, its 45 s freeze %v\n", demoTTL, demoFreeze)

	tl := &timeline{w: out}
	var checks []check
	for _, scene := range []func(context.Context, *demoEnv, *pgxpool.Pool, *timeline) ([]check, error){
		a.sceneCompete, a.sceneFenced, a.sceneUnfenced,
	} {
		cs, err := scene(ctx, env, pool, tl)
		if ctx.Err() != nil {
			return fail(128+int(syscall.SIGINT), "pgfence demo: interrupted; the demo cleaned up after itself")
		}
		if err != nil {
			return fail(exitFailed, "pgfence demo: %v", err)
		}
		checks = append(checks, cs...)
	}

	fmt.Fprintf(out, "\nVerdict (computed from what happened above)\n")
	failed := 0
	for _, c := range checks {
		mark := "ok  "
		if !c.ok {
			mark = "FAIL"
			failed++
		}
		fmt.Fprintf(out, "  %s  %s\n", mark, c.what)
	}
	if failed > 0 {
		fmt.Fprintf(out, "\nFAIL: %d of %d checks did not hold\n", failed, len(checks))
		return fail(exitFailed, "")
	}
	fmt.Fprintf(out, "\nPASS: the lock decided who may try; the fence decided which writes count.\n")
	return nil
}

func resetJob(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `TRUNCATE invoice_jobs, invoice_sends;
		INSERT INTO invoice_jobs (job_id, status) VALUES ('`+demoJob+`', 'PENDING')`)
	return err
}

type sendRow struct {
	worker string
	fence  int64
}

func sends(ctx context.Context, pool *pgxpool.Pool) ([]sendRow, error) {
	rows, err := pool.Query(ctx, `SELECT worker, fence FROM invoice_sends WHERE job_id = $1 ORDER BY id`, demoJob)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (sendRow, error) {
		var s sendRow
		return s, r.Scan(&s.worker, &s.fence)
	})
}

func rowFence(ctx context.Context, pool *pgxpool.Pool) (status string, fence int64, err error) {
	err = pool.QueryRow(ctx, `SELECT status, last_fence FROM invoice_jobs WHERE job_id = $1`, demoJob).Scan(&status, &fence)
	return
}

// sceneCompete: three instances notice inv_72 is due at once; each has its
// own pool and lease client, as separate services would.
func (a *app) sceneCompete(ctx context.Context, env *demoEnv, pool *pgxpool.Pool, tl *timeline) ([]check, error) {
	if err := resetJob(ctx, pool); err != nil {
		return nil, err
	}
	tl.scene("1. Every minute, three billing instances notice that invoice inv_72 is due")
	type result struct {
		name          string
		granted, sent bool
		skipped       bool
		err           error
	}
	results := make([]result, 3)
	startLine := make(chan struct{})
	var wg sync.WaitGroup
	for i := range results {
		name := fmt.Sprintf("billing-%d", i+1)
		results[i].name = name
		p, err := env.pool(ctx)
		if err != nil {
			return nil, err
		}
		defer p.Close()
		if err := p.Ping(ctx); err != nil {
			return nil, err
		}
		client, err := pglease.New(p, pglease.WithOwner(name))
		if err != nil {
			return nil, err
		}
		defer client.Close()
		wg.Add(1)
		go func(r *result) {
			defer wg.Done()
			<-startLine
			tl.log(name, "asks for %s (TTL %v)", demoKey, 2*demoTTL)
			lease, err := client.TryAcquire(ctx, demoKey, 2*demoTTL)
			if errors.Is(err, pglease.ErrNotAcquired) {
				r.skipped = true
				tl.log(name, "refused: another instance holds it; skips this tick")
				return
			}
			if err != nil {
				r.err = err
				return
			}
			r.granted = true
			tl.log(name, "granted, fence %d; renders the invoice (300ms)", lease.Fence())
			time.Sleep(300 * time.Millisecond)
			o, err := sendInvoice(ctx, p, true, name, lease.Fence())
			if err != nil {
				r.err = err
				return
			}
			r.sent = o.sent
			if r.sent {
				tl.log(name, "sends inv_72: guarded write with fence %d accepted", lease.Fence())
			} else {
				tl.log(name, "guarded write refused: %v", o.refusal)
			}
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := lease.Release(rctx); err != nil {
				r.err = err
				return
			}
			tl.log(name, "releases the lease")
		}(&results[i])
	}
	close(startLine)
	wg.Wait()
	granted, skipped := 0, 0
	for _, r := range results {
		if r.err != nil {
			return nil, fmt.Errorf("%s: %w", r.name, r.err)
		}
		if r.granted {
			granted++
		}
		if r.skipped {
			skipped++
		}
	}
	s, err := sends(ctx, pool)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(tl.w, "  -> invoices sent: %d; lease grants: %d; instances that skipped: %d\n", len(s), granted, skipped)
	return []check{
		{granted == 1 && skipped == 2, fmt.Sprintf("three instances competed for %s: %d was granted it, %d skipped", demoKey, granted, skipped)},
		{len(s) == 1, fmt.Sprintf("inv_72 was sent exactly once (sent: %d)", len(s))},
	}, nil
}

// staleRun is what happened in scene 2 or 3.
type staleRun struct {
	fenceA, fenceB int64
	bGranted       time.Duration // since the scene began
	aResumed       time.Duration
	bSent, aSent   bool
	aRefusal       string
	aCurrent       int64 // the row's fence that refused billing-1, per pgguard
	aLocalErr      string
	rowFence       int64
	sends          []sendRow
}

func (a *app) sceneFenced(ctx context.Context, env *demoEnv, pool *pgxpool.Pool, tl *timeline) ([]check, error) {
	tl.scene(fmt.Sprintf("2. A worker is frozen past its lease (the lesson's GC pause), with the fence at the resource\n"+
		"   billing-1 is a separate pgfence process; it is frozen with SIGSTOP for %v, its renewals with it", demoFreeze))
	r, err := a.staleScene(ctx, env, pool, tl, true)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(tl.w, "  -> invoices sent: %d; the row's fence is %d\n", len(r.sends), r.rowFence)
	return []check{
		{r.fenceB > r.fenceA, fmt.Sprintf("the new holder's fence is larger than the frozen one's (%d > %d)", r.fenceB, r.fenceA)},
		{r.bGranted < r.aResumed, fmt.Sprintf("billing-2 was granted the lease while billing-1 was frozen (at %.3fs; billing-1 resumed at %.3fs)", r.bGranted.Seconds(), r.aResumed.Seconds())},
		{r.bSent, "billing-2's guarded write was accepted"},
		{!r.aSent && r.aCurrent == r.fenceB && r.rowFence == r.fenceB,
			fmt.Sprintf("billing-1's late write with fence %d was refused as stale (pgguard saw fence %d on the row; the row keeps %d)", r.fenceA, r.aCurrent, r.rowFence)},
		{len(r.sends) == 1, fmt.Sprintf("with the fence, inv_72 was sent exactly once (sent: %d)", len(r.sends))},
	}, nil
}

func (a *app) sceneUnfenced(ctx context.Context, env *demoEnv, pool *pgxpool.Pool, tl *timeline) ([]check, error) {
	tl.scene("3. The same run without the fence: the writes trust the lock")
	r, err := a.staleScene(ctx, env, pool, tl, false)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(tl.w, "  -> invoices sent: %d (the customer received %d invoices)\n", len(r.sends), len(r.sends))
	return []check{
		{r.bGranted < r.aResumed && len(r.sends) == 2 && r.aSent,
			fmt.Sprintf("without the fence the same timeline sends inv_72 twice, as the lesson predicts (sent: %d): the lock alone did not prevent it", len(r.sends))},
	}, nil
}

// staleScene runs the lesson's timeline: billing-1 (a subprocess) acquires,
// reads the job, checks its lease, and is frozen with SIGSTOP just before
// its write; its lease expires by the database clock; billing-2 acquires and
// sends; billing-1 is resumed and writes with its old fence.
func (a *app) staleScene(ctx context.Context, env *demoEnv, pool *pgxpool.Pool, tl *timeline, fenced bool) (*staleRun, error) {
	if err := resetJob(ctx, pool); err != nil {
		return nil, err
	}
	r := &staleRun{}
	w, err := a.startWorker(ctx, env, "billing-1", fenced)
	if err != nil {
		return nil, err
	}
	defer w.kill()

	line, err := w.expect("ACQUIRED")
	if err != nil {
		return nil, err
	}
	r.fenceA, _ = strconv.ParseInt(line, 10, 64)
	tl.log("billing-1", "pid %d: granted %s, fence %d, TTL %v (auto-renewed every %v)", w.cmd.Process.Pid, demoKey, r.fenceA, demoTTL, (demoTTL / 3).Round(time.Millisecond))
	if line, err = w.expect("READ"); err != nil {
		return nil, err
	}
	tl.log("billing-1", "reads inv_72: %s", line)
	if line, err = w.expect("CHECKED"); err != nil {
		return nil, err
	}
	tl.log("billing-1", "checks its lease before writing: %s", line)
	// Freeze it between the check and the write: the time-of-check to
	// time-of-use gap of the lesson.
	if err := proc.Stop(w.cmd.Process.Pid, 5*time.Second); err != nil {
		return nil, err
	}
	tl.log("billing-1", "FROZEN (SIGSTOP) for %v: a GC pause, a VM stall; it cannot renew", demoFreeze)
	frozeAt := time.Now()
	io.WriteString(w.stdin, "GO\n") // buffered in the pipe: read the instant it resumes

	// billing-2 arrives a little later and waits for the key.
	p, err := env.pool(ctx)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	client, err := pglease.New(p, pglease.WithOwner("billing-2"), pglease.WithMaxWait(3*demoTTL), pglease.WithBackoff(5*time.Millisecond, 40*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer client.Close()
	time.Sleep(200 * time.Millisecond)
	tl.log("billing-2", "asks for %s and waits while it is held", demoKey)
	lease, err := client.Acquire(ctx, demoKey, demoTTL)
	if err != nil {
		return nil, fmt.Errorf("billing-2: %w", err)
	}
	r.fenceB = lease.Fence()
	r.bGranted = time.Since(tl.start)
	tl.log("billing-2", "granted, fence %d: billing-1's lease expired by the database clock", r.fenceB)
	tl.log("billing-2", "(fences have gaps: each attempt while waiting drew one; they only ever grow)")
	status, _, err := rowFence(ctx, p)
	if err != nil {
		return nil, err
	}
	tl.log("billing-2", "reads inv_72: %s", status)
	o, err := sendInvoice(ctx, p, fenced, "billing-2", r.fenceB)
	if err != nil {
		return nil, err
	}
	r.bSent = o.sent
	switch {
	case fenced && o.sent:
		tl.log("billing-2", "sends inv_72: guarded write with fence %d accepted", r.fenceB)
	case fenced:
		tl.log("billing-2", "guarded write refused: %v", o.refusal)
	default:
		tl.log("billing-2", "sends inv_72: unguarded write (sent: %v)", o.sent)
	}
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err = lease.Release(rctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("billing-2: %w", err)
	}
	tl.log("billing-2", "releases the lease")

	if left := demoFreeze - time.Since(frozeAt); left > 0 {
		select {
		case <-time.After(left):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err := w.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return nil, err
	}
	r.aResumed = time.Since(tl.start)
	tl.log("billing-1", "resumes (SIGCONT); the next instruction runs as if no time had passed")
	if line, err = w.expect("WROTE"); err != nil {
		return nil, err
	}
	// WROTE <sent> <row fence if refused as stale> <refusal>
	f := strings.SplitN(line, " ", 3)
	if len(f) < 2 {
		return nil, fmt.Errorf("billing-1: bad report %q", line)
	}
	r.aSent = f[0] == "true"
	r.aCurrent, _ = strconv.ParseInt(f[1], 10, 64)
	if len(f) == 3 {
		r.aRefusal = f[2]
	}
	switch {
	case fenced && !r.aSent:
		tl.log("billing-1", "sends inv_72 with its old fence %d: REFUSED by the resource", r.fenceA)
		tl.log("billing-1", "  %s", r.aRefusal)
	case fenced:
		tl.log("billing-1", "sends inv_72 with its old fence %d: accepted", r.fenceA)
	case r.aSent:
		tl.log("billing-1", "sends inv_72 (it read PENDING before the freeze): SENT AGAIN")
	default:
		tl.log("billing-1", "sends inv_72 (it read PENDING before the freeze): nothing changed")
	}
	if line, err = w.expect("LOCAL"); err != nil {
		return nil, err
	}
	r.aLocalErr = line
	tl.log("billing-1", "its own lease client now says: %s", line)
	tl.log("billing-1", "(that local view came too late to stop the write; only the resource can refuse it)")
	if _, err := w.expect("DONE"); err != nil {
		return nil, err
	}
	if _, r.rowFence, err = rowFence(ctx, pool); err != nil {
		return nil, err
	}
	if r.sends, err = sends(ctx, pool); err != nil {
		return nil, err
	}
	return r, nil
}

// demoWorker is a billing instance running as a separate pgfence process.
type demoWorker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	name  string
}

const workerEnvURL = "PGFENCE_DEMO_WORKER_URL"

func (a *app) startWorker(ctx context.Context, env *demoEnv, name string, fenced bool) (*demoWorker, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	mode := "fenced"
	if !fenced {
		mode = "unfenced"
	}
	cmd := exec.CommandContext(ctx, self, "demo-worker", env.schema, name, mode)
	// The URL goes through the environment, not argv, which ps shows.
	cmd.Env = append(os.Environ(), workerEnvURL+"="+env.url)
	cmd.Stderr = a.stderr
	cmd.SysProcAttr = procAttr()
	w := &demoWorker{cmd: cmd, name: name, lines: make(chan string, 16)}
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
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
		close(w.lines)
	}()
	return w, nil
}

// expect waits for the worker's next line, which must start with word, and
// returns the rest of it.
func (w *demoWorker) expect(word string) (string, error) {
	select {
	case line, ok := <-w.lines:
		if !ok {
			return "", fmt.Errorf("%s exited before reporting %s", w.name, word)
		}
		if line == word {
			return "", nil
		}
		rest, found := strings.CutPrefix(line, word+" ")
		if !found {
			return "", fmt.Errorf("%s: expected %s, got %q", w.name, word, line)
		}
		return rest, nil
	case <-time.After(15 * time.Second):
		return "", fmt.Errorf("%s: no %s report within 15s", w.name, word)
	}
}

func (w *demoWorker) kill() {
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

// runDemoWorker is the hidden "demo-worker" command: one billing instance
// of the demo's stale-writer scenes, driven over stdin/stdout.
func runDemoWorker(args []string) int {
	if len(args) != 3 {
		fmt.Fprintln(os.Stderr, "demo-worker is internal to pgfence demo")
		return exitUsage
	}
	schema, name, fenced := args[0], args[1], args[2] == "fenced"
	say := func(format string, a ...any) { fmt.Printf(format+"\n", a...) }
	ctx := context.Background()
	env := &demoEnv{url: os.Getenv(workerEnvURL), schema: schema}
	pool, err := env.pool(ctx)
	if err != nil {
		say("ERR %v", err)
		return exitFailed
	}
	defer pool.Close()
	client, err := pglease.New(pool, pglease.WithOwner(name))
	if err != nil {
		say("ERR %v", err)
		return exitFailed
	}
	defer client.Close()
	lease, err := client.TryAcquire(ctx, demoKey, demoTTL)
	if err != nil {
		say("ERR %v", err)
		return exitFailed
	}
	say("ACQUIRED %d", lease.Fence())
	status, fence, err := rowFence(ctx, pool)
	if err != nil {
		say("ERR %v", err)
		return exitFailed
	}
	say("READ %s (row fence %d)", status, fence)
	if lease.Err() == nil {
		say("CHECKED valid; about to send")
	} else {
		say("CHECKED lost: %v", lease.Err())
	}
	// The freeze lands here; the parent resumes us with GO in the pipe.
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return exitFailed
	}
	o, err := sendInvoice(ctx, pool, fenced, name, lease.Fence())
	if err != nil {
		say("ERR %v", err)
		return exitFailed
	}
	if o.refusal != nil {
		say("WROTE %v %d %s", o.sent, o.current, strings.ReplaceAll(o.refusal.Error(), "\n", " "))
	} else {
		say("WROTE %v %d", o.sent, o.current)
	}
	// Let a timer that was due during the freeze fire, as it will a moment
	// after any real resume; then report the client's own view.
	time.Sleep(50 * time.Millisecond)
	if lerr := lease.Err(); lerr != nil {
		say("LOCAL %v", lerr)
	} else {
		say("LOCAL lease still valid")
	}
	say("DONE")
	return exitOK
}
