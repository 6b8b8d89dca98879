package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/cmd/pgfence/internal/dsn"
	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/fencesql"
	"github.com/pgfence/pgfence/internal/pgdb"
	"github.com/pgfence/pgfence/internal/pgerr"
	"github.com/pgfence/pgfence/internal/validate"
	"github.com/pgfence/pgfence/migrations"
)

// Exit codes of pgfence itself. exec passes the command's own code through;
// these are chosen outside the codes commands commonly use (1, 2, 124-127,
// 128+N for signals, 255) so that a script can tell pgfence's outcomes from
// the command's.
const (
	exitOK          = 0
	exitFailed      = 1  // show: no such key; verify: a check failed; doctor: a warning; other runtime failures
	exitUsage       = 80 // bad flags or arguments: missing --key, bad duration, malformed URL, no command
	exitHeld        = 81 // exec: the key is held by another owner (--skip-if-held, or no --wait)
	exitWaitExpired = 82 // exec --wait D: still held after D
	exitLeaseLost   = 83 // exec: the lease was lost while the command ran; the command was stopped
	exitUnreachable = 84 // the database could not be reached (exec fails closed unless --fail-open)
	exitDBError     = 85 // the database answered with an error: schema missing, login refused, permission denied
	exitCannotExec  = 126
	exitNotFound    = 127
)

// exitError carries an exit code and the message to print for it.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func fail(code int, format string, args ...any) *exitError {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

// app holds what every subcommand shares: output streams that never show a
// password, and the scrubber behind them. stdout carries data (keys, fences,
// times), where a short password may occur inside a number by chance: it is
// scrubbed by whole tokens (dsn.Scrubber.Tokens); stderr, errors and logs,
// everywhere.
type app struct {
	stdout, stderr io.Writer
	scrub          *dsn.Scrubber
	globalURL      string
	schema         string // --schema; "" = PGFENCE_SCHEMA, else the default layout
}

func main() {
	scrub := &dsn.Scrubber{}
	a := &app{stdout: scrub.TokenWriter(os.Stdout), stderr: scrub.Writer(os.Stderr), scrub: scrub}
	os.Exit(a.run(context.Background(), os.Args[1:]))
}

const usageText = `pgfence: leases with fencing tokens on PostgreSQL.

Usage:
  pgfence [--database-url URL] [--schema NAME] COMMAND [FLAGS] [ARGS]
  pgfence --version

Commands:
  exec     run a command while holding a lease on a key (like flock, with a fence)
  list     list leases: owner, fence, held or expired, remaining time (database clock)
  show     show one lease
  plan     size a TTL and renew interval: freezes absorbed, renewals that may fail
  migrate  create (up), drop (down), inspect (version) or print (sql) pgfence's schema
  serve    a live page, Prometheus /metrics and /healthz on 127.0.0.1:9187 (read-only)
  verify   run a short contended workload through your DSN and check it on the database's record
  doctor   check the deployment pgfence runs on: server, schema, pooler, replication, grants, triggers
  version  print pgfence's release (and VCS revision) and exit

The demo is an example: go run ./examples/demo in a checkout
(go run github.com/pgfence/pgfence/examples/demo@latest elsewhere).

The database: --database-url, else PGFENCE_DATABASE_URL, else DATABASE_URL,
else the libpq variables (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, ...).
Passwords are never printed.

The schema: --schema, else PGFENCE_SCHEMA, else the connection's search_path
(pgfence's objects unqualified, as created by a plain migrate up). With a
schema, migrate up creates it and puts every pgfence object there, and the
other commands name that schema's objects in every statement: no search_path
is involved, so it works behind PgBouncer too.

Exit codes of pgfence itself (exec otherwise exits with the command's code):
  0    success
  1    show: no such key; verify: a check failed; doctor: a finding warns; other failures
  2    doctor: a finding fails
  80   usage: bad flag or argument, missing --key, bad duration, malformed URL, no command
  81   exec: the key is held by another owner (--skip-if-held, or no --wait given)
  82   exec --wait: still held when the wait ran out
  83   exec: the lease was lost while the command ran; the command was terminated
  84   the database is unreachable (exec fails closed unless --fail-open)
  85   the database refused: pgfence's schema is missing, an object of its name exists, login or permission denied
  126  exec: the command was found but could not be run
  127  exec: the command was not found
  128+N exec: the command was killed by signal N

Run 'pgfence COMMAND -h' for a command's flags.
`

func (a *app) run(ctx context.Context, args []string) int {
	global := flag.NewFlagSet("pgfence", flag.ContinueOnError)
	global.SetOutput(io.Discard)
	global.StringVar(&a.globalURL, "database-url", "", "PostgreSQL URL")
	global.StringVar(&a.schema, "schema", "", "pgfence's schema")
	showVersion := global.Bool("version", false, "print the version and exit")
	if err := global.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(a.stdout, usageText)
			return exitOK
		}
		fmt.Fprintf(a.stderr, "pgfence: %v\n\n%s", err, usageText)
		return exitUsage
	}
	a.scrub.Add(dsn.Secrets(a.globalURL)...)
	if *showVersion {
		fmt.Fprintln(a.stdout, versionLine())
		return exitOK
	}
	rest := global.Args()
	if len(rest) == 0 {
		fmt.Fprintf(a.stderr, "pgfence: no command given\n\n%s", usageText)
		return exitUsage
	}
	var err error
	switch rest[0] {
	case "exec":
		return a.cmdExec(ctx, rest[1:])
	case "list":
		err = a.cmdList(ctx, rest[1:])
	case "show":
		err = a.cmdShow(ctx, rest[1:])
	case "plan":
		err = a.cmdPlan(rest[1:])
	case "migrate":
		err = a.cmdMigrate(ctx, rest[1:])
	case "version":
		fmt.Fprintln(a.stdout, versionLine())
		return exitOK
	case "serve":
		err = a.cmdServe(ctx, rest[1:])
	case "verify":
		return a.cmdVerify(ctx, rest[1:])
	case "doctor":
		return a.cmdDoctor(ctx, rest[1:])
	case "help", "-h", "--help":
		fmt.Fprint(a.stdout, usageText)
		return exitOK
	default:
		fmt.Fprintf(a.stderr, "pgfence: unknown command %q\n\n%s", rest[0], usageText)
		return exitUsage
	}
	return a.exitCode(err)
}

// exitCode prints err and returns its exit code.
func (a *app) exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(a.stderr, ee.msg)
		}
		return ee.code
	}
	fmt.Fprintf(a.stderr, "pgfence: %v\n", err)
	return exitFailed
}

// newFlags returns a subcommand's flag set; databaseURL, when non-nil, gets
// the --database-url flag.
func (a *app) newFlags(name, usage string, databaseURL *string) *flag.FlagSet {
	fs := flag.NewFlagSet("pgfence "+name, flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	if databaseURL != nil {
		fs.StringVar(databaseURL, "database-url", "", "PostgreSQL URL (default: PGFENCE_DATABASE_URL, DATABASE_URL, then the PG* variables)")
		// Same field as the global flag, which was parsed first: its value
		// is the default here.
		fs.StringVar(&a.schema, "schema", a.schema, "the schema holding pgfence's objects (default: PGFENCE_SCHEMA, else the search_path's)")
	}
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fmt.Fprintln(fs.Output(), "\nFlags:")
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses flags that may come before or after positional
// arguments, and returns the positionals. -h prints the usage and yields an
// exitError with code 0.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, &exitError{code: exitOK}
			}
			return nil, &exitError{code: exitUsage} // the flag package printed why
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// connect resolves the database, opens a small pool and checks that the
// server answers. Errors are exitErrors with the codes of the table above.
func (a *app) connect(ctx context.Context, flagURL string) (*pgxpool.Pool, string, error) {
	return a.connectConns(ctx, flagURL, 4)
}

// connectConns is connect with a pool of at most maxConns connections.
func (a *app) connectConns(ctx context.Context, flagURL string, maxConns int32) (*pgxpool.Pool, string, error) {
	if flagURL == "" {
		flagURL = a.globalURL
	}
	raw, src := dsn.Resolve(flagURL)
	a.scrub.Add(dsn.Secrets(raw)...)
	cfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		return nil, "", fail(exitUsage, "pgfence: the database URL from %s is malformed: %v", dsn.Describe(src), parseErrDetail(err))
	}
	a.scrub.Add(cfg.ConnConfig.Password)
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	cfg.MaxConns = maxConns
	if s := a.schemaName(); s != "" {
		// The schema travels in each statement (the clients' WithSchema
		// options), not in a search_path: that works behind PgBouncer too.
		if err := validate.Identifier("schema", s); err != nil {
			return nil, "", fail(exitUsage, "pgfence: --schema / PGFENCE_SCHEMA: %v", err)
		}
	}
	where := fmt.Sprintf("%s (from %s)", describe(cfg), dsn.Describe(src))
	if s := a.schemaName(); s != "" {
		where += fmt.Sprintf(", schema %q", s)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, where, fail(exitUsage, "pgfence: database %s: %v", where, err)
	}
	pctx, cancel := context.WithTimeout(ctx, cfg.ConnConfig.ConnectTimeout+time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, where, dbError(where, err)
	}
	return pool, where, nil
}

// schemaName is the schema pgfence's objects live in: --schema, else
// PGFENCE_SCHEMA, else "" (the connection's search_path, today's layout).
func (a *app) schemaName() string {
	if a.schema != "" {
		return a.schema
	}
	return os.Getenv("PGFENCE_SCHEMA")
}

// queries runs the generated statements on pool in the chosen schema.
func (a *app) queries(pool *pgxpool.Pool) *fencedb.Queries {
	return fencedb.New(pgdb.Wrap(pool, a.schemaName()))
}

// own is queries for pgfence's own statements (package fencesql).
func (a *app) own(pool *pgxpool.Pool) *fencesql.Queries {
	return fencesql.New(pgdb.Wrap(pool, a.schemaName()))
}

// migrationOpts passes the chosen schema to the migrations.
func (a *app) migrationOpts() []migrations.Option {
	if s := a.schemaName(); s != "" {
		return []migrations.Option{migrations.WithSchema(s)}
	}
	return nil
}

// parseErrDetail says why a connection string did not parse, without
// quoting it: pgx and net/url quote the string, or a fragment of it (which
// may be a fragment of the password), in double quotes or backquotes, so
// every quoted part is dropped.
func parseErrDetail(err error) string {
	msg := err.Error()
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		if i := strings.Index(msg, "`: "); i >= 0 {
			msg = msg[i+3:]
		}
	}
	return quoted.ReplaceAllString(msg, "\"...\"")
}

var quoted = regexp.MustCompile("\"[^\"]*\"|`[^`]*`")

// describe names a server without its password: user@host:port/database.
func describe(cfg *pgxpool.Config) string {
	c := cfg.ConnConfig
	host := c.Host
	if strings.HasPrefix(host, "/") {
		host = "socket " + host
	}
	return fmt.Sprintf("%s@%s:%d/%s", c.User, host, c.Port, c.Database)
}

// isUnreachable reports errors that mean no answer from a working server:
// network failures (refused, reset, DNS, a closed connection), timeouts, and
// a server that is starting, stopping or out of connections. Anything else
// that did not come from the server (a missing schema found by a query, a
// TLS certificate that does not verify, a bad option) is not: exec
// --fail-open must not run a command without a lease for those.
func isUnreachable(err error) bool {
	if pgerr.FromServer(err) {
		return pgerr.IsUnavailable(err)
	}
	var netErr net.Error
	return errors.As(err, &netErr) || pgconn.Timeout(err) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

const migrateHint = "pgfence's schema is missing from this database: run `pgfence migrate up` first"

// dbError turns a database error into an exitError with a hint.
func dbError(where string, err error) error {
	var missing *pgdb.MissingError
	var denied *pgdb.PrivilegeError
	switch {
	case errors.As(err, &denied): // a role that is not a member of pgfence_client
		return fail(exitDBError, "pgfence: database %s: %v", where, err)
	case errors.Is(err, migrations.ErrBehindPooler), errors.Is(err, migrations.ErrNoSuchSchema):
		return fail(exitDBError, "pgfence: database %s: %v", where, err)
	case pgerr.IsDuplicate(err): // an object pgfence's migrations would create
		return fail(exitDBError, "pgfence: database %s: %v: an object of that name already exists and is not pgfence's; "+
			"rename or drop it (or put pgfence in a schema of its own), then run pgfence migrate up again", where, err)
	case pgerr.IsPreparedStatementClash(err):
		return fail(exitDBError, "pgfence: database %s: %v: a named prepared statement met another server session, "+
			"a transaction pooler (PgBouncer pool_mode=transaction) is in between; the schema is not missing", where, err)
	case errors.As(err, &missing): // a statement in --schema's schema met no pgfence object
		return fail(exitDBError, "pgfence: database %s: pgfence's schema %q is missing from this database: run `pgfence migrate up --schema %s` first (%v)",
			where, missing.Schema, missing.Schema, missing.Err)
	case pgerr.IsUndefined(err): // on pgfence's own statements: the migrations never ran
		return fail(exitDBError, "pgfence: database %s: %s (%v)", where, migrateHint, err)
	case isUnreachable(err):
		return fail(exitUnreachable, "pgfence: cannot reach the database %s: %v", where, err)
	default:
		return fail(exitDBError, "pgfence: database %s: %v", where, err)
	}
}

// durationFlag is a time.Duration flag whose parse error says what to type.
type durationFlag struct{ d *time.Duration }

func (f durationFlag) String() string {
	if f.d == nil {
		return "0s"
	}
	return f.d.String()
}

func (f durationFlag) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("not a duration: give a number with a unit, e.g. 30s, 1m30s or 500ms")
	}
	if d < 0 {
		return fmt.Errorf("must not be negative")
	}
	*f.d = d
	return nil
}

func durVar(fs *flag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	fs.Var(durationFlag{p}, name, usage)
}
