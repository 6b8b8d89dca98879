package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/pgfence/pgfence/migrations"
)

const migrateUsage = `Usage: pgfence migrate up | down --yes | version | force VERSION --yes

  up       apply every pgfence migration not yet applied (idempotent)
  down     drop pgfence's tables, functions and fence sequence. Fences issued
           afterwards start again from the bottom, so only do this when nothing
           still holds or remembers a fence from this database; needs --yes
  version  print the applied schema version and the newest this binary knows
  force    record VERSION as applied and clear the dirty flag, running nothing
           (as golang-migrate's force): after checking by hand what a failed
           migration left; -1 records that none is applied; needs --yes

Run migrations on a direct connection to PostgreSQL, not through a
transaction pooler such as PgBouncer: they hold a session-level lock.
`

func (a *app) cmdMigrate(ctx context.Context, args []string) error {
	var url string
	var yes bool
	fs := a.newFlags("migrate", migrateUsage, &url)
	fs.BoolVar(&yes, "yes", false, "confirm migrate down or force")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	force := -2
	switch {
	case len(pos) == 2 && pos[0] == "force":
		v, err := strconv.Atoi(pos[1])
		if err != nil || v < -1 {
			return fail(exitUsage, "pgfence migrate force: VERSION must be a schema version (0 or more) or -1, got %q", pos[1])
		}
		if !yes {
			return fail(exitUsage, "pgfence migrate force %d records version %d as applied without running anything; check the schema by hand first, then add --yes", v, v)
		}
		force = v
	case len(pos) != 1 || (pos[0] != "up" && pos[0] != "down" && pos[0] != "version"):
		return fail(exitUsage, "pgfence migrate: give one of up, down, version, force VERSION\n\n%s", migrateUsage)
	}
	if pos[0] == "down" && !yes {
		return fail(exitUsage, "pgfence migrate down drops the lease table and the fence sequence (fences would start again from the bottom); add --yes to confirm")
	}
	pool, where, err := a.connect(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	latest, err := migrations.Latest()
	if err != nil {
		return err
	}
	switch pos[0] {
	case "up":
		if err := migrations.Up(ctx, pool, a.migrationOpts()...); err != nil {
			return dbError(where, err)
		}
	case "down":
		if err := migrations.Down(ctx, pool, a.migrationOpts()...); err != nil {
			return dbError(where, err)
		}
	case "force":
		if err := migrations.Force(ctx, pool, force, a.migrationOpts()...); err != nil {
			return dbError(where, err)
		}
	}
	v, dirty, err := migrations.Version(ctx, pool, a.migrationOpts()...)
	if err != nil {
		return dbError(where, err)
	}
	note := ""
	switch {
	case dirty:
		note = " DIRTY: a migration failed half-way; check the schema by hand, then pgfence migrate force VERSION --yes"
	case v == 0:
		note = " (no pgfence schema; run pgfence migrate up)"
	case v < latest:
		note = " (behind; run pgfence migrate up)"
	case v > latest:
		note = " (newer than this binary knows)"
	}
	fmt.Fprintf(a.stdout, "pgfence schema version %d (this binary's newest: %d)%s\n", v, latest, note)
	if dirty {
		return fail(exitDBError, "")
	}
	return nil
}
