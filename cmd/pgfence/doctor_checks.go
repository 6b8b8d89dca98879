package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/internal/pgdb"
	"github.com/pgfence/pgfence/internal/pgerr"
	"github.com/pgfence/pgfence/migrations"
)

// doctor is one diagnosis under way: what the checks share, and the
// findings so far.
type doctor struct {
	app  *app
	pool *pgxpool.Pool
	opts doctorOpts
	// schema is the schema holding pgfence's objects, as the schema check
	// found it (--schema, else the search_path's first); "" when there is
	// none, and the checks that read pgfence's tables are left out.
	schema string
	// pooling is what the pooler check found.
	pooling pgdb.Pooling
	// standby: the server is in recovery.
	standby  bool
	findings []finding
}

// doctorChecks run in this order; each adds its findings. A check returns
// an error only when the diagnosis cannot go on (the database went away).
var doctorChecks = []func(context.Context, *doctor) error{
	checkServer,
	checkPooler,
	checkSchema,
	checkDurability,
	checkReplication,
	checkPrivileges,
	checkTriggers,
	checkSweep,
	checkLeases,
	checkQueues,
	checkTombstones,
}

func (d *doctor) add(f finding) { d.findings = append(d.findings, f) }

// db runs statements in pgfence's exec mode (safe behind a transaction
// pooler), the names qualified by the statements themselves.
func (d *doctor) db() pgdb.DB { return pgdb.Wrap(d.pool, "") }

// table is pgfence's object name qualified with the schema found.
func (d *doctor) table(name string) string { return pgx.Identifier{d.schema, name}.Sanitize() }

// readFailed turns an error of check's read into a finding: a fail, or a
// warn when the role may not read what the check reads (a client role
// needs less than the doctor would like to see). It returns the error
// itself when the database went away, which ends the diagnosis.
func (d *doctor) readFailed(check, what string, err error) error {
	if isUnreachable(err) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	f := finding{Check: check, Status: statusFail, Title: "could not read " + what, Read: d.app.scrub.String(err.Error())}
	if pgerr.Is(err, pgerrcode.InsufficientPrivilege) {
		f.Status, f.Do = statusWarn, "run pgfence doctor as the owner of pgfence's schema to see this"
	}
	d.add(f)
	return nil
}

// migrateCmd is the migrate command for the schema doctor inspects, on a
// direct connection: migrations refuse a transaction pooler.
func (d *doctor) migrateCmd(args string) string {
	cmd := "pgfence migrate " + args
	if s := d.app.schemaName(); s != "" {
		cmd = "pgfence --schema " + s + " migrate " + args
	}
	if d.pooling == pgdb.PoolingTransaction {
		cmd += " (on a direct connection to PostgreSQL: migrations refuse a transaction pooler)"
	}
	return cmd
}

// minServerVersion is the oldest PostgreSQL pgfence's migrations run on:
// they use pg_current_xact_id() (PostgreSQL 13).
const minServerVersion = 130000

func checkServer(ctx context.Context, d *doctor) error {
	var version string
	var num int
	err := d.db().QueryRow(ctx, "SELECT current_setting('server_version'), current_setting('server_version_num')::int, pg_is_in_recovery()").
		Scan(&version, &num, &d.standby)
	if err != nil {
		return d.readFailed("server", "the server's version", err)
	}
	f := finding{Check: "server", Status: statusOK, Title: "PostgreSQL " + version + ", a primary",
		Read: fmt.Sprintf("server_version %s, pg_is_in_recovery() false", version)}
	switch {
	case d.standby:
		f.Status, f.Title = statusFail, "connected to a standby: only the primary grants leases"
		f.Read = fmt.Sprintf("server_version %s, pg_is_in_recovery() true", version)
		f.Do = "point the DSN at the primary: list every host with target_session_attrs=read-write (docs/failover.md, item 4)"
	case num < minServerVersion:
		f.Status, f.Title = statusFail, "PostgreSQL "+version+" is older than pgfence supports"
		f.Do = "upgrade to PostgreSQL 13 or newer"
	}
	d.add(f)
	return nil
}

// transactionPoolerLimits is what a transaction pooler takes away, as
// docs/pgbouncer.md lists it.
const transactionPoolerLimits = "docs/pgbouncer.md:\n" +
	"LISTEN wake-ups (pglease.WithWakeOnRelease, with or without WithFairWaiting; claim.Runner's WithListen) need a listen pool " +
	"given to them that connects directly, else waiters poll;\n" +
	"migrations need a direct connection;\n" +
	"session-level advisory locks (advisory.SessionLock) do not work: use advisory.TryDo or Do;\n" +
	"a search_path startup parameter (RuntimeParams) is refused: use --schema / WithSchema;\n" +
	"your own queries need default_query_exec_mode=cache_describe (or exec) in their pool's URL"

func checkPooler(ctx context.Context, d *doctor) error {
	c, err := d.pool.Acquire(ctx)
	if err != nil {
		return d.readFailed("pooler", "what lies in front of PostgreSQL", err)
	}
	defer c.Release()
	d.pooling, err = pgdb.DetectPooling(ctx, c.Conn(), d.pool)
	if err != nil {
		return d.readFailed("pooler", "what lies in front of PostgreSQL", err)
	}
	const read = "the backend pid the connection announced against pg_backend_pid(), on two connections in turn"
	switch d.pooling {
	case pgdb.PoolingNone:
		d.add(finding{Check: "pooler", Status: statusOK, Title: "a direct connection: no pooler in front",
			Read: "the connection's backend pid is the server's pg_backend_pid()"})
	case pgdb.PoolingSession:
		d.add(finding{Check: "pooler", Status: statusOK, Title: "a session pooler in front (PgBouncer pool_mode=session, say): session state works",
			Read: read + ": each connection kept its own server session"})
	default:
		d.add(finding{Check: "pooler", Status: statusWarn,
			Title: "a transaction pooler in front (PgBouncer pool_mode=transaction or statement, say): leases work, some things need a setting",
			Read:  read + ": one server session served both, or one connection was served by two",
			Do:    transactionPoolerLimits})
	}
	return nil
}

func checkSchema(ctx context.Context, d *doctor) error {
	latest, err := migrations.Latest()
	if err != nil {
		return err
	}
	st, err := migrations.Inspect(ctx, d.pool, d.app.migrationOpts()...)
	f := finding{Check: "schema", Status: statusFail}
	switch {
	case errors.Is(err, migrations.ErrNoSuchSchema):
		f.Title = fmt.Sprintf("pgfence's schema %s does not exist", quoteIdent(d.app.schemaName()))
		f.Read, f.Do = fmt.Sprintf("no schema named %s in this database", quoteIdent(d.app.schemaName())), d.migrateCmd("up")
	case err != nil:
		if pgerr.Is(err, pgerrcode.InsufficientPrivilege) {
			// The schema is there; the role may not read it, which the
			// privileges check says more about.
			d.schema = st.Schema
		}
		return d.readFailed("schema", "pgfence's schema version", err)
	case st.Schema == "":
		f.Title, f.Read = "no pgfence schema: the search_path names no existing schema", "current_schema() is NULL"
		f.Do = "give --schema (or PGFENCE_SCHEMA), or set the role's search_path; then " + d.migrateCmd("up")
	default:
		d.schema = st.Schema
		f.Read = schemaLine(st, latest)
		switch {
		case st.Dirty:
			f.Title = fmt.Sprintf("schema version %d is dirty: a migration failed half-way", st.Version)
			f.Do = fmt.Sprintf("check the schema by hand, then %s", d.migrateCmd(fmt.Sprintf("force %d --yes", st.Version)))
		case st.AppliedElsewhere() && len(st.Missing) == 0:
			f.Status, f.Title = statusWarn, "pgfence's objects were applied by another tool, and no version is recorded"
			f.Do = d.migrateCmd(fmt.Sprintf("force %d --yes", latest)) + " records the version, so that pgfence migrate up manages the schema"
		case st.AppliedElsewhere():
			f.Title, f.Do = "pgfence's schema, applied by another tool, is incomplete", "apply the missing objects (pgfence migrate sql prints them all)"
		case !st.Recorded || st.Version == 0:
			f.Title, f.Do = "pgfence's schema is missing", d.migrateCmd("up")
			d.schema = ""
		case st.Version < latest:
			f.Title = fmt.Sprintf("schema version %d is behind this binary's %d: clients of this release call objects it lacks", st.Version, latest)
			f.Do = d.migrateCmd("up")
		case st.Version > latest:
			f.Status, f.Title = statusWarn, fmt.Sprintf("schema version %d is newer than this binary's %d", st.Version, latest)
			f.Do = "upgrade pgfence (this binary judges a schema it does not know)"
		case len(st.Missing) > 0:
			f.Title, f.Do = "pgfence's schema lacks objects of its version", "apply the missing objects (pgfence migrate sql prints them all), or "+d.migrateCmd("down --yes")+" then up"
		default:
			f.Status, f.Title = statusOK, fmt.Sprintf("schema version %d in %s, this binary's newest", st.Version, quoteIdent(st.Schema))
		}
	}
	if f.Status == statusFail && d.schema == "" {
		f.Do += "; then run pgfence doctor again: the privileges, trigger and housekeeping checks read pgfence's schema"
	}
	d.add(f)
	return nil
}

func checkDurability(ctx context.Context, d *doctor) error {
	var commit, fsync, fullPages string
	if err := d.db().QueryRow(ctx, "SELECT current_setting('synchronous_commit'), current_setting('fsync'), current_setting('full_page_writes')").
		Scan(&commit, &fsync, &fullPages); err != nil {
		return d.readFailed("durability", "synchronous_commit, fsync and full_page_writes", err)
	}
	f := finding{Check: "durability", Status: statusOK,
		Read:  fmt.Sprintf("synchronous_commit = %s, fsync = %s, full_page_writes = %s", commit, fsync, fullPages),
		Title: "commits wait for the WAL flush (and for a synchronous standby, where one is named)"}
	switch {
	case fsync != "on" || fullPages != "on":
		// A durable commit is only as durable as the flush under it: with
		// fsync off, an operating-system crash or a power cut can lose
		// committed grants, and the fence source with them, so a fence
		// already handed out can be handed out again.
		f.Status = statusWarn
		f.Title = "fsync or full_page_writes is off: a crash of the machine can lose committed grants and hand a fence out twice"
		f.Do = "ALTER SYSTEM SET fsync = on; ALTER SYSTEM SET full_page_writes = on; SELECT pg_reload_conf(); (fine to leave off only on a throwaway test server)"
	case commit == "off":
		f.Status = statusWarn
		f.Title = "synchronous_commit is off: pgfence's grants raise it for themselves, but writes of yours under a fence may be lost in a crash"
		f.Do = "ALTER ROLE ... SET synchronous_commit = on (or on the database); docs/operations.md, Durability"
	case commit == "local":
		f.Status = statusWarn
		f.Title = "synchronous_commit is local: commits do not wait for a synchronous standby, so a failover can lose acknowledged grants"
		f.Do = "set synchronous_commit = on (or remote_apply); docs/failover.md"
	}
	d.add(f)
	return nil
}
