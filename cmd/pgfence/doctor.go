package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/internal/validate"
)

const doctorUsage = `Usage: pgfence doctor [--table NAME]... [--patroni URL] [--json]

Reads the deployment pgfence runs on, changing nothing, and says for each
condition pgfence's guarantees rest on whether it holds: ok, warn or fail,
a one-line title, the figure or setting read, and what to do.
  server       the server's version; a standby (pg_is_in_recovery()) fails:
               only the primary grants
  schema       pgfence's schema version against this binary's: missing,
               behind, dirty or incomplete fails
  pooler       a pooler in front and its mode: a transaction pooler warns,
               listing what then needs a setting (docs/pgbouncer.md)
  durability   synchronous_commit: off or local warns
  replication  synchronous_standby_names and the standbys streaming from the
               server (pg_stat_replication); with --patroni, Patroni's
               synchronous_mode and synchronous_mode_strict and its members.
               Asynchronous standbys warn: a paused ("zombie") primary can
               then acknowledge grants and writes a failover rewinds away
               (docs/failover.md)
  privileges   the role: superuser, owner of pgfence's schema, or member of
               pgfence_client, else what to GRANT
  trigger      each --table (schema.table allowed; repeatable): the table
               exists and has pgfence's fencing trigger, enabled
  sweep        lease rows expired over an hour ago, waiting for
               SweepExpired: warns above 10000 rows
  leases       held leases and the oldest one; one that never expires warns
  queues       waiters in fair queues per key, the deepest three
  tombstones   tombstones of ambiguous acquisitions: one older than two hours
               warns (SweepExpired deletes them after one)
It reads everything first, then prints; --json prints one object with the
same findings.

Without --patroni the replication finding judges from PostgreSQL alone,
which cannot tell whether a synchronous setup falls back to asynchronous when
its standby goes (Patroni's synchronous_mode_strict): pass the REST API of
any Patroni node (http://127.0.0.1:8008; user:password@ in the URL for basic
authentication, never printed) to check it.

Exit codes:
  0   every finding is ok
  1   a finding warns, none fails
  2   a finding fails
  80  usage: bad flag or argument, malformed URL
  84  the database is unreachable
  85  the database refused the login
`

// Bounds of the housekeeping findings, chosen so that a deployment that
// sweeps as docs/operations.md says (hourly, SweepExpired(ctx, time.Hour))
// never warns, and one that never sweeps does within a day of ordinary
// traffic.
const (
	// sweepAge is the age past which an expired lease row waits for a
	// sweep: the age operations.md's hourly sweep deletes.
	sweepAge = time.Hour
	// sweepWarnRows is how many such rows warn: ten of SweepExpired's
	// batches; below it the table is small whatever the sweep does.
	sweepWarnRows = 10000
	// tombstoneWarnAge is the age of a tombstone that warns: SweepExpired
	// deletes them after an hour, so one twice as old says no sweep ran.
	tombstoneWarnAge = 2 * time.Hour
	// deepestQueues is how many of the deepest queues the queues finding
	// names.
	deepestQueues = 3
)

// doctorOpts are doctor's flags.
type doctorOpts struct {
	url     string
	tables  []string
	patroni string
	asJSON  bool
}

// tablesFlag collects --table, repeatable.
type tablesFlag struct{ list *[]string }

func (f tablesFlag) String() string {
	if f.list == nil {
		return ""
	}
	return strings.Join(*f.list, ",")
}

func (f tablesFlag) Set(v string) error {
	if _, err := splitTable(v); err != nil {
		return err
	}
	*f.list = append(*f.list, v)
	return nil
}

// splitTable splits NAME or SCHEMA.NAME (as stored: no quotes, names are
// case-sensitive) and checks each part.
func splitTable(v string) ([]string, error) {
	parts := strings.Split(v, ".")
	if len(parts) > 2 {
		return nil, fmt.Errorf("give TABLE or SCHEMA.TABLE, got %d dotted parts", len(parts))
	}
	for _, p := range parts {
		if err := validate.Identifier("table", p); err != nil {
			return nil, err
		}
	}
	return parts, nil
}

func (a *app) cmdDoctor(ctx context.Context, args []string) int {
	var o doctorOpts
	fs := a.newFlags("doctor", doctorUsage, &o.url)
	fs.Var(tablesFlag{&o.tables}, "table", "check the fencing trigger of table `NAME` (SCHEMA.NAME allowed; repeatable)")
	fs.StringVar(&o.patroni, "patroni", "", "Patroni REST API `URL` of any node, e.g. http://127.0.0.1:8008")
	fs.BoolVar(&o.asJSON, "json", false, "print one JSON object")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return a.exitCode(err)
	}
	if len(pos) > 0 {
		return a.exitCode(fail(exitUsage, "pgfence doctor: unexpected argument %q (doctor takes flags only; see pgfence doctor -h)", pos[0]))
	}
	if o.patroni != "" {
		if err := a.checkPatroniURL(o.patroni); err != nil {
			return a.exitCode(err)
		}
	}
	pool, where, err := a.connect(ctx, o.url)
	if err != nil {
		return a.exitCode(err)
	}
	defer pool.Close()
	rep, err := a.diagnose(ctx, pool, where, o)
	if err != nil {
		return a.exitCode(err)
	}
	if o.asJSON {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	} else {
		rep.print(a.stdout)
	}
	return rep.exitCode()
}

// checkPatroniURL refuses a --patroni that is not an http(s) URL, and keeps
// its password out of every output.
func (a *app) checkPatroniURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fail(exitUsage, "pgfence doctor: --patroni wants the REST API's URL, e.g. http://127.0.0.1:8008")
	}
	if p, ok := u.User.Password(); ok {
		a.scrub.Add(p)
	}
	return nil
}

// doctorStatus is a finding's verdict, in increasing gravity.
type doctorStatus string

const (
	statusOK   doctorStatus = "ok"
	statusWarn doctorStatus = "warn"
	statusFail doctorStatus = "fail"
)

func (s doctorStatus) rank() int {
	switch s {
	case statusWarn:
		return 1
	case statusFail:
		return 2
	}
	return 0
}

// finding is one line of doctor's report.
type finding struct {
	// Check names the condition: server, schema, pooler, durability,
	// replication, privileges, trigger, sweep, leases, queues, tombstones.
	Check  string       `json:"check"`
	Status doctorStatus `json:"status"`
	Title  string       `json:"title"`
	// Read is the figure or setting the verdict comes from.
	Read string `json:"read"`
	// Do is what to do: a command, a setting or a docs page; "" when
	// nothing needs doing.
	Do string `json:"do,omitempty"`
}

// doctorReport is doctor's whole answer, as --json prints it and serve's
// /api/doctor serves it.
type doctorReport struct {
	Database string         `json:"database"`
	Status   doctorStatus   `json:"status"` // the gravest finding's
	Counts   map[string]int `json:"counts"` // findings per status
	Findings []finding      `json:"findings"`
}

func newReport(where string, fs []finding) *doctorReport {
	r := &doctorReport{Database: where, Status: statusOK, Findings: fs,
		Counts: map[string]int{string(statusOK): 0, string(statusWarn): 0, string(statusFail): 0}}
	for _, f := range fs {
		r.Counts[string(f.Status)]++
		if f.Status.rank() > r.Status.rank() {
			r.Status = f.Status
		}
	}
	return r
}

// exitCode is 0 for ok, 1 for a warn, 2 for a fail.
func (r *doctorReport) exitCode() int { return r.Status.rank() }

// print writes the report for a terminal: one block per finding, the
// status first so that a glance down the left edge finds what is wrong.
func (r *doctorReport) print(w io.Writer) {
	fmt.Fprintf(w, "pgfence doctor: database %s\n\n", r.Database)
	for _, f := range r.Findings {
		fmt.Fprintf(w, "%-5s %-12s %s\n", f.Status, f.Check, f.Title)
		fmt.Fprintf(w, "%18s %s\n", "read:", f.Read)
		if f.Do != "" {
			fmt.Fprintf(w, "%18s %s\n", "do:", strings.ReplaceAll(f.Do, "\n", "\n"+strings.Repeat(" ", 19)))
		}
	}
	fmt.Fprintf(w, "\n%d ok, %d warn, %d fail: %s\n", r.Counts["ok"], r.Counts["warn"], r.Counts["fail"], r.Status)
}

// doctorTimeout bounds one whole diagnosis: the reads are a few catalog
// and statistics queries and a count over the lease table.
const doctorTimeout = time.Minute

// diagnose reads every finding on pool, then returns them. Errors that end
// the diagnosis (the database went away) come back as exitErrors; every
// other failure to read something is a finding of its own.
func (a *app) diagnose(ctx context.Context, pool *pgxpool.Pool, where string, o doctorOpts) (*doctorReport, error) {
	ctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	d := &doctor{app: a, pool: pool, opts: o}
	for _, c := range doctorChecks {
		if err := c(ctx, d); err != nil {
			return nil, dbError(where, err)
		}
	}
	return newReport(where, d.findings), nil
}
