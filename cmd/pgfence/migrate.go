package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/migrations"
)

const migrateUsage = `Usage: pgfence migrate up | down --yes | version | force VERSION --yes | sql [--dir DIR]

  up       apply every pgfence migration not yet applied (idempotent), and
           say which it applied, or that the schema was already at the newest
  down     drop pgfence's tables, functions and fence sequence. Fences issued
           afterwards start again from the bottom, so only do this when nothing
           still holds or remembers a fence from this database; needs --yes
  version  print the applied schema version and the newest this binary knows;
           changes nothing. It also recognises pgfence's objects applied by
           another tool (psql, a migration tool of your own)
  force    record VERSION as applied and clear the dirty flag, running nothing
           (as golang-migrate's force): after checking by hand what a failed
           migration left, or to adopt a schema another tool applied; -1
           records that none is applied; needs --yes
  sql      print pgfence's whole schema as one plain SQL script, for psql or a
           migration tool of your own (goose, Atlas, Flyway, dbmate); with
           --dir DIR, write the numbered up and down files into DIR instead.
           Needs no database. With --schema, the SQL creates that schema and
           puts everything into it

Run migrations on a direct connection to PostgreSQL, not through a
transaction pooler such as PgBouncer: they hold a session-level lock.
golang-migrate's own CLI applies the same files when told
x-migrations-table=pgfence_schema_migrations in its database URL.
`

func (a *app) cmdMigrate(ctx context.Context, args []string) error {
	var url, dir string
	var yes bool
	fs := a.newFlags("migrate", migrateUsage, &url)
	fs.BoolVar(&yes, "yes", false, "confirm migrate down or force")
	fs.StringVar(&dir, "dir", "", "migrate sql: write numbered up/down files into this directory")
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
	case len(pos) != 1 || (pos[0] != "up" && pos[0] != "down" && pos[0] != "version" && pos[0] != "sql"):
		return fail(exitUsage, "pgfence migrate: give one of up, down, version, force VERSION, sql\n\n%s", migrateUsage)
	}
	if dir != "" && pos[0] != "sql" {
		return fail(exitUsage, "pgfence migrate: --dir belongs to migrate sql")
	}
	if pos[0] == "sql" {
		return a.migrateSQL(dir)
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
	opts := a.migrationOpts()
	var before migrations.State
	switch pos[0] {
	case "up":
		if before, err = migrations.Inspect(ctx, pool, opts...); err != nil && !errors.Is(err, migrations.ErrNoSuchSchema) {
			return dbError(where, err)
		}
		if err := migrations.Up(ctx, pool, opts...); err != nil {
			return dbError(where, err)
		}
	case "down":
		if err := migrations.Down(ctx, pool, opts...); err != nil {
			return dbError(where, err)
		}
	case "force":
		if err := migrations.Force(ctx, pool, force, opts...); err != nil {
			return dbError(where, err)
		}
	}
	st, err := migrations.Inspect(ctx, pool, opts...)
	if err != nil {
		return dbError(where, err)
	}
	if pos[0] == "up" {
		fmt.Fprintln(a.stdout, appliedLine(before.Version, st.Version))
	}
	fmt.Fprintln(a.stdout, schemaLine(st, latest))
	if st.Dirty {
		return fail(exitDBError, "")
	}
	return nil
}

func quoteIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

// appliedLine says what an up did, given the versions before and after.
func appliedLine(before, after uint) string {
	if before == after {
		return fmt.Sprintf("pgfence migrate up: already at version %d, nothing applied", after)
	}
	names, _ := migrationNames(before, after)
	return fmt.Sprintf("pgfence migrate up: applied %s (version %d -> %d)", strings.Join(names, ", "), before, after)
}

// migrationNames lists the up migrations above version from, up to to.
func migrationNames(from, to uint) ([]string, error) {
	files, err := upFiles()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, f := range files {
		if f.version > from && f.version <= to {
			names = append(names, strings.TrimSuffix(f.name, ".up.sql"))
		}
	}
	return names, nil
}

// schemaLine reports a schema's state, and what to do about it.
func schemaLine(st migrations.State, latest uint) string {
	line := fmt.Sprintf("pgfence schema version %d (this binary's newest: %d)", st.Version, latest)
	switch {
	case st.Dirty:
		return line + " DIRTY: a migration failed half-way; check the schema by hand, then pgfence migrate force VERSION --yes"
	case st.AppliedElsewhere() && len(st.Missing) == 0:
		return fmt.Sprintf("pgfence schema: every object of version %d is in schema %s, applied by another tool (no %s table); "+
			"pgfence migrate up would not run the files again: to let it manage the schema, record the version with pgfence migrate force %d --yes",
			latest, quoteIdent(st.Schema), migrations.Table, latest)
	case st.AppliedElsewhere():
		return fmt.Sprintf("pgfence schema: schema %s holds pgfence's objects, applied by another tool (no %s table), but lacks %s",
			quoteIdent(st.Schema), migrations.Table, strings.Join(st.Missing, ", "))
	case st.Version == 0:
		return line + " (no pgfence schema; run pgfence migrate up)"
	case st.Version < latest:
		return line + " (behind; run pgfence migrate up)"
	case st.Version > latest:
		return line + " (newer than this binary knows)"
	case len(st.Missing) > 0:
		return line + " but schema " + quoteIdent(st.Schema) + " lacks " + strings.Join(st.Missing, ", ") +
			" (made by an older build of version " + strconv.FormatUint(uint64(st.Version), 10) + ", or changed by hand)"
	}
	return line
}
