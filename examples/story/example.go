package story

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Exit codes of an example.
const (
	ExitPass        = 0
	ExitFail        = 1   // a check failed, or the example could not run
	ExitInterrupted = 130 // SIGINT or SIGTERM
)

// Env is what an example runs against.
type Env struct {
	// Pool is a pool on the example's own database (or schema), which is
	// dropped on exit.
	Pool *pgxpool.Pool

	cfg        *pgxpool.Config
	connString string

	out   io.Writer
	start time.Time
	mu    sync.Mutex
	pools []*pgxpool.Pool
}

// NewPool opens another pool on the example's database, for a "separate
// instance" that should not share connections with the others. It is closed
// when the example ends.
func (e *Env) NewPool(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	cfg := e.cfg.Copy()
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.pools = append(e.pools, p)
	e.mu.Unlock()
	return p, nil
}

// ConnString is a connection string for the example's database (its
// schema included, when the example fell back to one), for a program the
// example starts as a separate process, which must inherit this one's
// environment (with no URL set, libpq's variables complete it). It may
// carry the password: hand it over in the environment, which ps does not
// show, not on a command line.
func (e *Env) ConnString() string { return e.connString }

// Logf prints one timeline line: the time since the example started, who
// acted, and what happened. Safe for concurrent use.
func (e *Env) Logf(who, format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	fmt.Fprintf(e.out, "  %6.3fs  %-10s %s\n", time.Since(e.start).Seconds(), who, fmt.Sprintf(format, args...))
}

// Section starts a part of the example's story.
func (e *Env) Section(title string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	fmt.Fprintf(e.out, "\n== %s\n", title)
}

// Note prints an explanation, indented, without a timestamp.
func (e *Env) Note(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	fmt.Fprintf(e.out, "  %s\n", fmt.Sprintf(format, args...))
}

// Verdict collects the checks an example makes on what it observed.
type Verdict struct {
	mu     sync.Mutex
	checks []check
}

type check struct {
	ok   bool
	text string
}

// Check records one property: text says what should hold (and, with the
// numbers observed, what was seen); ok says whether it did.
func (v *Verdict) Check(ok bool, format string, args ...any) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.checks = append(v.checks, check{ok: ok, text: fmt.Sprintf(format, args...)})
	return ok
}

// report returns the checks, one per line ("  ok    ..." or "  BROKE ..."),
// the verdict line, and whether it is a PASS. The verdict line stays short
// enough for a terminal: it counts the checks and names only those that
// broke.
func (v *Verdict) report() (checks []string, verdict string, pass bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var broke []string
	for _, c := range v.checks {
		mark := "  ok    "
		if !c.ok {
			mark = "  BROKE "
			broke = append(broke, c.text)
		}
		checks = append(checks, mark+c.text)
	}
	switch {
	case len(v.checks) == 0:
		return nil, "VERDICT: FAIL — the example made no checks", false
	case len(broke) > 0:
		return checks, fmt.Sprintf("VERDICT: FAIL — %d of %d checks broke: %s", len(broke), len(v.checks), strings.Join(broke, "; ")), false
	}
	return checks, fmt.Sprintf("VERDICT: PASS — all %d checks held", len(v.checks)), true
}

// Main runs an example and exits with its verdict's code. title names the
// scenario; run tells the story on env and records checks on v. An error
// from run means the example could not finish: the verdict is FAIL.
func Main(title string, run func(ctx context.Context, env *Env, v *Verdict) error) {
	os.Exit(Run(os.Stdout, os.Stderr, title, run))
}

// Run is Main without the exit: every deferred cleanup (the example's
// database, a throwaway server) has run when it returns the exit code.
func Run(stdout, stderr io.Writer, title string, run func(ctx context.Context, env *Env, v *Verdict) error) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r := &runner{ctx: ctx, stdout: stdout, stderr: stderr}

	fmt.Fprintf(stdout, "pgfence example: %s\n", title)
	srv, err := findServer(ctx, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "pgfence example: %v\n", err)
		return r.failed("no PostgreSQL server to run on (see stderr)")
	}
	defer r.closeServer(srv)

	env, closeEnv, err := r.newEnv(srv)
	if err != nil {
		return r.failed("%v", err)
	}
	defer closeEnv()

	v := &Verdict{}
	runErr := run(ctx, env, v)
	fmt.Fprintln(stdout)
	switch {
	case ctx.Err() != nil:
		return r.failed("interrupted")
	case runErr != nil:
		return r.failed("the example could not finish: %v", runErr)
	}
	checks, line, pass := v.report()
	for _, c := range checks {
		fmt.Fprintln(stdout, c)
	}
	fmt.Fprintln(stdout, line)
	if !pass {
		return ExitFail
	}
	return ExitPass
}

// runner is one run of an example: where it reports, and its context,
// which ends on SIGINT or SIGTERM.
type runner struct {
	ctx            context.Context
	stdout, stderr io.Writer
}

// failed prints a FAIL verdict and returns the exit code: interrupted, or
// a failure.
func (r *runner) failed(format string, args ...any) int {
	if r.ctx.Err() != nil {
		fmt.Fprintln(r.stdout, "VERDICT: FAIL — interrupted before the checks could finish")
		return ExitInterrupted
	}
	fmt.Fprintln(r.stdout, "VERDICT: FAIL — "+fmt.Sprintf(format, args...))
	return ExitFail
}

// closeServer removes a server the fallback started and says so.
func (r *runner) closeServer(srv *Server) {
	if srv.Close == nil {
		return
	}
	if err := srv.Close(); err != nil {
		fmt.Fprintf(r.stderr, "pgfence example: removing %s: %v\n", srv.Source, err)
	} else {
		fmt.Fprintf(r.stderr, "pgfence example: %s was stopped and removed\n", srv.Source)
	}
}

// newEnv makes the example its own database (or schema) on srv and a pool
// on it. closeEnv closes every pool and drops the database.
func (r *runner) newEnv(srv *Server) (env *Env, closeEnv func(), err error) {
	place, err := openOwn(r.ctx, srv)
	if err != nil {
		fmt.Fprintf(r.stderr, "pgfence example: on %s: %v\n", srv.Source, err)
		return nil, nil, errors.New("could not make the example a database of its own (see stderr)")
	}
	pool, err := pgxpool.NewWithConfig(r.ctx, place.cfg.Copy())
	if err != nil {
		place.drop()
		return nil, nil, fmt.Errorf("connecting to the example's database: %w", err)
	}
	env = &Env{Pool: pool, cfg: place.cfg, connString: place.connString(srv), out: r.stdout, start: time.Now()}
	fmt.Fprintf(r.stdout, "database: %s on %s; dropped on exit\n", place.where, srv.Source)
	return env, func() {
		for _, p := range env.pools {
			p.Close()
		}
		pool.Close()
		place.drop()
	}, nil
}

// WaitFor polls cond every 10ms until it holds, for at most 30 seconds: for
// an example's story to wait for a step another goroutine takes.
func WaitFor(ctx context.Context, cond func() bool) error {
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out waiting for the scenario to progress")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// Count returns how many of xs equal want.
func Count[T comparable](xs []T, want T) int {
	n := 0
	for _, x := range xs {
		if x == want {
			n++
		}
	}
	return n
}
