package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/internal/validate"
	"github.com/pgfence/pgfence/migrations"
)

// migrationFile is one embedded migration file.
type migrationFile struct {
	name    string // 000008_baseline.up.sql
	version uint
	up      bool
}

// migrationFiles lists the embedded migration files in version order, each
// version's up file before its down file.
func migrationFiles() ([]migrationFile, error) {
	entries, err := fs.ReadDir(migrations.FS(), ".")
	if err != nil {
		return nil, err
	}
	var files []migrationFile
	for _, e := range entries {
		up := strings.HasSuffix(e.Name(), ".up.sql")
		if !up && !strings.HasSuffix(e.Name(), ".down.sql") {
			continue
		}
		num, _, _ := strings.Cut(e.Name(), "_")
		v, err := strconv.ParseUint(num, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("pgfence: migration file %s has no version number", e.Name())
		}
		files = append(files, migrationFile{name: e.Name(), version: uint(v), up: up})
	}
	// ReadDir sorts by name: "….down.sql" before "….up.sql" of a version.
	for i := 0; i+1 < len(files); i++ {
		if files[i].version == files[i+1].version && !files[i].up {
			files[i], files[i+1] = files[i+1], files[i]
			i++
		}
	}
	return files, nil
}

// upFiles lists the up migrations in version order.
func upFiles() ([]migrationFile, error) {
	all, err := migrationFiles()
	var ups []migrationFile
	for _, f := range all {
		if f.up {
			ups = append(ups, f)
		}
	}
	return ups, err
}

// migrateSQL prints the whole schema as one script, or with dir writes
// each migration file into dir, for the schema chosen with --schema (the
// session's current schema when none is).
func (a *app) migrateSQL(dir string) error {
	schema := a.schemaName()
	if schema != "" {
		if err := validate.Identifier("schema", schema); err != nil {
			return fail(exitUsage, "pgfence migrate sql: %v", err)
		}
	}
	files, err := migrationFiles()
	if err != nil {
		return err
	}
	latest, err := migrations.Latest()
	if err != nil {
		return err
	}
	if dir != "" {
		return writeMigrationFiles(a, dir, schema, files)
	}
	var b strings.Builder
	for _, f := range files {
		if !f.up {
			continue
		}
		body, err := fs.ReadFile(migrations.FS(), f.name)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "\n-- %s\n%s", f.name, body)
	}
	fmt.Fprintf(a.stdout, "-- pgfence's schema, version %d, as one plain SQL script (pgfence migrate sql).\n%s\n%s",
		latest, whereComment(schema), inSchema(schema, true, b.String()))
	return nil
}

// writeMigrationFiles writes each migration file into dir, set up for
// schema, and lists what it wrote.
func writeMigrationFiles(a *app, dir, schema string, files []migrationFile) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(exitFailed, "pgfence migrate sql: %v", err)
	}
	for _, f := range files {
		body, err := fs.ReadFile(migrations.FS(), f.name)
		if err != nil {
			return err
		}
		text := fmt.Sprintf("-- %s of pgfence (pgfence migrate sql --dir).\n%s\n%s", f.name, whereComment(schema), inSchema(schema, f.up, string(body)))
		path := filepath.Join(dir, f.name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			return fail(exitFailed, "pgfence migrate sql: %v", err)
		}
		fmt.Fprintln(a.stdout, path)
	}
	return nil
}

func whereComment(schema string) string {
	if schema == "" {
		return "-- Every object goes into the current schema of the session that runs it\n" +
			"-- (the first existing schema of its search_path).\n"
	}
	return fmt.Sprintf("-- Every object goes into schema %s: the script sets the session's\n"+
		"-- search_path to it while it runs and restores it at the end.\n", pgx.Identifier{schema}.Sanitize())
}

// inSchema wraps sql so that it runs with the search_path set to schema
// (created first when create is set), and restores the session's
// search_path afterwards, in a transaction or in autocommit alike. With no
// schema, sql runs in the session's current schema as it is.
func inSchema(schema string, create bool, sql string) string {
	if schema == "" {
		return sql
	}
	q := pgx.Identifier{schema}.Sanitize() // validated: holds no quote
	var b strings.Builder
	if create {
		fmt.Fprintf(&b, "CREATE SCHEMA IF NOT EXISTS %s;\n", q)
	}
	fmt.Fprintf(&b, "DO $pgfence$ BEGIN\n"+
		"  PERFORM set_config('pgfence.saved_search_path', current_setting('search_path'), false);\n"+
		"  PERFORM set_config('search_path', '%s', false);\n"+
		"END $pgfence$;\n\n", q)
	b.WriteString(sql)
	b.WriteString("\nDO $pgfence$ BEGIN\n" +
		"  PERFORM set_config('search_path', current_setting('pgfence.saved_search_path'), false);\n" +
		"  PERFORM set_config('pgfence.saved_search_path', '', false);\n" +
		"END $pgfence$;\n")
	return b.String()
}
