package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/migrations"
)

var versionTables = []string{"*." + migrations.Table}

// psqlFile runs psql -v ON_ERROR_STOP=1 on a file and fails the test when
// psql fails.
func psqlFile(t *testing.T, db, file string) {
	t.Helper()
	out, err := exec.Command(pgtest.Tool(t, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", db, "-f", file).CombinedOutput()
	if err != nil {
		t.Fatalf("psql -f %s: %v\n%s", file, err, out)
	}
}

// hasVersionTable reports whether pgfence's version table exists anywhere
// in the database.
func hasVersionTable(t *testing.T, db string) bool {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = $1", migrations.Table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// `pgfence migrate sql | psql` on a fresh database makes the schema
// `pgfence migrate up` makes, in the default layout and in a schema of its
// own (--schema), and so do the files of `migrate sql --dir` run in order.
// migrate version then says another tool applied it, changes nothing, and
// force adopts it.
func TestMigrateSQL(t *testing.T) {
	t.Parallel()
	latest, err := migrations.Latest()
	if err != nil {
		t.Fatal(err)
	}
	for _, schema := range []string{"", "Fence Three"} {
		name := schema
		if name == "" {
			name = "default layout"
		}
		t.Run(name, func(t *testing.T) {
			var flags []string
			if schema != "" {
				flags = []string{"--schema", schema}
			}
			upDB := emptyDatabase(t)
			wantCode(t, pgfence(t, nil, append([]string{"migrate", "up", "--database-url", upDB}, flags...)...), 0)
			want := pgtest.DumpSchema(t, upDB, versionTables...)

			r := pgfence(t, nil, append([]string{"migrate", "sql"}, flags...)...)
			wantCode(t, r, 0)
			script := filepath.Join(t.TempDir(), "pgfence.sql")
			if err := os.WriteFile(script, []byte(r.stdout), 0o644); err != nil {
				t.Fatal(err)
			}
			db := emptyDatabase(t)
			psqlFile(t, db, script)
			if d := pgtest.DiffLines(want, pgtest.DumpSchema(t, db, versionTables...)); d != "" {
				t.Fatalf("migrate sql | psql differs from migrate up: %s", d)
			}

			dir := filepath.Join(t.TempDir(), "mig")
			r = pgfence(t, nil, append([]string{"migrate", "sql", "--dir", dir}, flags...)...)
			wantCode(t, r, 0)
			ups, err := filepath.Glob(filepath.Join(dir, "*.up.sql"))
			if err != nil || len(ups) == 0 || !strings.Contains(r.stdout, ups[0]) {
				t.Fatalf("migrate sql --dir wrote %v (%v): %s", ups, err, r)
			}
			dirDB := emptyDatabase(t)
			for _, f := range ups {
				psqlFile(t, dirDB, f)
			}
			if d := pgtest.DiffLines(want, pgtest.DumpSchema(t, dirDB, versionTables...)); d != "" {
				t.Fatalf("the files of migrate sql --dir differ from migrate up: %s", d)
			}

			r = pgfence(t, nil, append([]string{"migrate", "version", "--database-url", db}, flags...)...)
			wantCode(t, r, 0)
			if !strings.Contains(r.stdout, "applied by another tool") || !strings.Contains(r.stdout, "migrate force "+itoa(latest)+" --yes") {
				t.Fatalf("version of a schema psql applied: %s", r)
			}
			if hasVersionTable(t, db) {
				t.Fatal("migrate version created the version table")
			}
			r = pgfence(t, nil, append([]string{"migrate", "up", "--database-url", db}, flags...)...)
			wantCode(t, r, exitDBError)
			if !strings.Contains(r.stderr, "another tool") || hasVersionTable(t, db) {
				t.Fatalf("up on a schema psql applied: %s", r)
			}
			wantCode(t, pgfence(t, nil, append([]string{"migrate", "force", itoa(latest), "--yes", "--database-url", db}, flags...)...), 0)
			r = pgfence(t, nil, append([]string{"migrate", "up", "--database-url", db}, flags...)...)
			wantCode(t, r, 0)
			if !strings.Contains(r.stdout, "already at version "+itoa(latest)) {
				t.Fatalf("up after force: %s", r)
			}
			r = pgfence(t, nil, append([]string{"exec", "--database-url", db, "--key", "k"}, append(flags, "--", "true")...)...)
			wantCode(t, r, 0)
		})
	}
	wantCode(t, pgfence(t, nil, "migrate", "sql", "--schema", `x"; DROP TABLE y`), exitUsage)
	wantCode(t, pgfence(t, nil, "migrate", "version", "--dir", t.TempDir()), exitUsage)
}
