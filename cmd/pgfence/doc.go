// Command pgfence runs commands under PostgreSQL leases with fencing tokens,
// inspects leases, sizes TTLs and manages pgfence's schema.
//
// Usage:
//
//	pgfence [--database-url URL] [--schema NAME] COMMAND [FLAGS] [ARGS]
//	pgfence --version
//
// Commands:
//
//	exec --key K [--ttl 30s] [--wait D | --skip-if-held] [--renew D] [--grace 10s] [--fail-open] [--owner NAME] -- COMMAND [ARGS...]
//	    Runs COMMAND while holding and renewing the lease on K, like flock,
//	    etcdctl lock and consul lock, and passes PGFENCE_KEY, PGFENCE_FENCE
//	    and PGFENCE_OWNER to it. Forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT
//	    (then SIGCONT). Run in the foreground of a terminal, it gives the
//	    command's process group the terminal, as a shell does for a job.
//	    Releases the lease when the command ends and exits with its code. If
//	    the lease is lost, sends SIGTERM to the command's process group, SIGKILL
//	    after --grace (to whatever of the group still runs, even if the command
//	    itself has exited), and exits 83.
//	list [--json] [--held]
//	    Every lease row: owner, fence, held or expired, time left by the
//	    database clock.
//	show [--json] KEY
//	    One lease.
//	plan --ttl 30s [--renew 10s] [--freeze 45s] [--margin 3s]
//	    Worst-case freeze absorbed (TTL - renew), renewals that may fail in a
//	    row, the stale window of a longer freeze; warns when the renew interval
//	    is too close to the TTL. Needs no database.
//	migrate up | down --yes | version
//	    Applies, reverts or reports pgfence's schema.
//	serve [--listen 127.0.0.1:9187] [--interval 2s] [--soon 5s] [--limit 100] [--allow-remote]
//	    Read-only HTTP: a live page (/), its JSON (/api/state), Prometheus
//	    metrics (/metrics: pgfence_leases_held, pgfence_leases_expiring_soon,
//	    pgfence_lease_fence{key,owner} for at most --limit keys,
//	    pgfence_jobs{queue,state}, pgfence_jobs_oldest_runnable_age_seconds,
//	    pgfence_stale_refusals_total, pgfence_serve_database_up,
//	    pgfence_serve_snapshot_age_seconds; units and rules in
//	    internal/watch) and /healthz. Reads the database once per --interval.
//	    Refuses a non-loopback --listen without --allow-remote.
//	version (or --version)
//	    Prints the release (v0.1.0), then the module version when it is a
//	    build between releases, the VCS revision and modified flag when the
//	    build stamped them, and the Go version.
//
// The demo is an example, not a command (the CLI links no test harness):
// go run ./examples/demo.
//
// The database comes from --database-url, then PGFENCE_DATABASE_URL, then
// DATABASE_URL, then the libpq variables (PGHOST, PGPORT, PGUSER,
// PGPASSWORD, PGDATABASE, ...). Passwords are never printed: connection
// strings are redacted and every known password is masked in all output.
//
// pgfence's objects live in the schema --schema (or PGFENCE_SCHEMA) names:
// migrate up creates it and migrates into it, and every other command names
// that schema's objects in each statement (the library's WithSchema
// options), so no search_path is needed and it works behind PgBouncer in
// transaction mode. Without one, the objects are found through the
// connection's search_path, as a plain migrate up created them.
//
// Exit codes of pgfence itself (exec otherwise exits with its command's code):
//
//	0    success
//	1    show: no such key; other failures
//	80   usage: bad flag or argument, missing --key, bad duration, malformed URL, no command
//	81   exec: the key is held by another owner (--skip-if-held, or no --wait)
//	82   exec --wait: still held when the wait ran out
//	83   exec: the lease was lost while the command ran; the command was terminated
//	84   the database is unreachable (exec fails closed unless --fail-open)
//	85   the database refused: schema missing (run pgfence migrate up), login or permission denied
//	126  exec: the command cannot be run
//	127  exec: the command was not found
//	128+N exec: the command was killed by signal N
package main
