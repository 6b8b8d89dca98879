package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/migrations"
	"github.com/pgfence/pgfence/pglease"
)

// versionTables are left out of catalog comparisons: pgfence's, and the
// one golang-migrate's CLI uses by default.
var versionTables = []string{"*." + migrations.Table, "*.schema_migrations"}

func poolOn(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// upDump is the catalog Up makes on a fresh database.
func upDump(t *testing.T, opts ...migrations.Option) string {
	t.Helper()
	url := pgtest.BareDatabase(t)
	if err := migrations.Up(context.Background(), poolOn(t, url), opts...); err != nil {
		t.Fatal(err)
	}
	return pgtest.DumpSchema(t, url, versionTables...)
}

// runTool runs a program and fails the test with its output when it fails.
func runTool(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// upFiles are the embedded up migrations, in order, as paths on disk.
func upFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.up.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no up migrations in the package directory (%v)", err)
	}
	slices.Sort(files)
	return files
}

// The files are plain SQL: psql applies them one by one with
// ON_ERROR_STOP, as they are, and gets exactly the catalog Up makes (version
// tables aside). Inspect then recognises the schema as applied by another
// tool; Up refuses to run the files again, and after Force records the
// version, Up is a no-op and the clients work.
func TestPsqlAppliesTheFiles(t *testing.T) {
	ctx := context.Background()
	want := upDump(t)
	url := pgtest.BareDatabase(t)
	for _, f := range upFiles(t) {
		runTool(t, nil, pgtest.Tool(t, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url, "-f", f)
	}
	if d := pgtest.DiffLines(want, pgtest.DumpSchema(t, url, versionTables...)); d != "" {
		t.Fatalf("psql's catalog differs from Up's: %s", d)
	}
	pool := poolOn(t, url)
	st, err := migrations.Inspect(ctx, pool)
	if err != nil || !st.AppliedElsewhere() || len(st.Missing) != 0 || st.Recorded || st.Version != 0 {
		t.Fatalf("Inspect after psql = %+v, %v; want every object present, unrecorded", st, err)
	}
	latest, _ := migrations.Latest()
	force := fmt.Sprintf("Force(%d)", latest)
	if err := migrations.Up(ctx, pool); !errors.Is(err, migrations.ErrUnrecorded) || !strings.Contains(err.Error(), force) {
		t.Fatalf("Up on the schema psql applied = %v, want ErrUnrecorded suggesting %s", err, force)
	}
	if st, _ := migrations.Inspect(ctx, pool); st.Recorded {
		t.Fatal("the refused Up created the version table")
	}
	if err := migrations.Force(ctx, pool, int(latest)); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatalf("Up after Force: %v", err)
	}
	leaseWorks(t, pool)
}

// golang-migrate's own CLI, built from the module pgfence already depends
// on, applies the files: told x-migrations-table=pgfence_schema_migrations,
// it records the version where Up and Version read it; with search_path in
// its URL it puts everything into that schema, as Up's WithSchema does.
func TestGolangMigrateCLIAppliesTheFiles(t *testing.T) {
	ctx := context.Background()
	migrate := buildMigrateCLI(t)
	latest, _ := migrations.Latest()
	for _, schema := range []string{"", "fence_two"} {
		name := schema
		if name == "" {
			name = "default layout"
		}
		t.Run(name, func(t *testing.T) {
			var opts []migrations.Option
			if schema != "" {
				opts = append(opts, migrations.WithSchema(schema))
			}
			want := upDump(t, opts...)
			dbURL := pgtest.BareDatabase(t)
			pool := poolOn(t, dbURL)
			target := strings.Replace(dbURL, "postgres://", "pgx5://", 1) + "&x-migrations-table=" + migrations.Table
			if schema != "" {
				if _, err := pool.Exec(ctx, `CREATE SCHEMA "`+schema+`"`); err != nil {
					t.Fatal(err)
				}
				target += "&search_path=" + url.QueryEscape(schema)
			}
			runTool(t, nil, migrate, "-path", ".", "-database", target, "up")
			if d := pgtest.DiffLines(want, pgtest.DumpSchema(t, dbURL, versionTables...)); d != "" {
				t.Fatalf("golang-migrate's catalog differs from Up's: %s", d)
			}
			v, dirty, err := version(ctx, pool, opts...)
			if err != nil || dirty || v != latest {
				t.Fatalf("Version after golang-migrate's CLI = %d %v %v, want %d", v, dirty, err, latest)
			}
			if err := migrations.Up(ctx, pool, opts...); err != nil {
				t.Fatalf("Up after golang-migrate's CLI: %v", err)
			}
			var n int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE tablename = 'schema_migrations'`).Scan(&n); err != nil || n != 0 {
				t.Fatalf("golang-migrate created its default schema_migrations table (%d, %v)", n, err)
			}
			if schema == "" {
				leaseWorks(t, pool)
			}
		})
	}
}

// buildMigrateCLI builds golang-migrate's CLI with its pgx/v5 driver, from
// the version in pgfence's module graph, into the test's temp directory.
func buildMigrateCLI(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	out := filepath.Join(t.TempDir(), "migrate")
	runTool(t, nil, goBin, "build", "-tags", "pgx5", "-o", out, "github.com/golang-migrate/migrate/v4/cmd/migrate")
	return out
}

// The one baseline replaces the pre-release chain of eight migrations
// (kept in testdata/prerelease, run as the former migrator ran them, names
// qualified with "public"): a database that chain brought to version 8 is
// at the baseline's version already, Up applies only the migrations after
// the baseline and the clients work on it. Its catalog is then the same as
// a fresh database's: the chain never had the SQL lease functions, which
// the migration of every kind into one table creates; the only other
// difference is that the chain wrote the schema in function bodies as
// "public" where the baseline writes public, the same name.
func TestBaselineMatchesPrereleaseChain(t *testing.T) {
	ctx := context.Background()
	oldURL := pgtest.BareDatabase(t)
	old := poolOn(t, oldURL)
	chain, err := filepath.Glob("testdata/prerelease/*.up.sql")
	if err != nil || len(chain) != 8 {
		t.Fatalf("want the 8 pre-release up migrations, found %d (%v)", len(chain), err)
	}
	slices.Sort(chain)
	for _, f := range chain {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sql := strings.ReplaceAll(string(b), "/* TEMPLATE: schema */", `"public".`)
		if _, err := old.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	if err := migrations.Force(ctx, old, 8); err != nil { // what the former migrator recorded
		t.Fatal(err)
	}

	// Up applies the migrations after the baseline (if any) to the chain's
	// schema as to a fresh one; the catalogs are compared after it.
	if err := migrations.Up(ctx, old); err != nil {
		t.Fatalf("Up on a database at the chain's version 8: %v", err)
	}
	latest, _ := migrations.Latest()
	if v, dirty, err := version(ctx, old); err != nil || dirty || v != latest {
		t.Fatalf("Version = %d %v %v, want %d", v, dirty, err, latest)
	}
	oldDump := strings.ReplaceAll(pgtest.DumpSchema(t, oldURL, versionTables...), `"public".`, "public.")
	st, err := migrations.Inspect(ctx, old)
	if err != nil || len(st.Missing) > 0 {
		t.Fatalf("the chain's schema lacks %v (%v), want nothing: the SQL lease functions come with every kind's", st.Missing, err)
	}
	leaseWorks(t, old)

	newURL := pgtest.BareDatabase(t)
	fresh := poolOn(t, newURL)
	if err := migrations.Up(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if d := pgtest.DiffLines(oldDump, pgtest.DumpSchema(t, newURL, versionTables...)); d != "" {
		t.Fatalf("the baseline's catalog differs from the pre-release chain's: %s", d)
	}
}

// leaseWorks takes and releases a lease through pglease on pool.
func leaseWorks(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	c, err := pglease.New(pool, pglease.WithoutAutoRenew())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.TryAcquire(ctx, "tools-test", time.Minute)
	if err != nil {
		t.Fatalf("pglease on this schema: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A session with no schema to create in, or whose schema's name cannot be
// written into a function body, gets a clear error from the first
// statement of the files, and nothing is created.
func TestFilesRefuseUnusableSchema(t *testing.T) {
	ctx := context.Background()
	url := pgtest.BareDatabase(t)
	base := poolOn(t, url)
	if _, err := base.Exec(ctx, `CREATE SCHEMA "it's"`); err != nil {
		t.Fatal(err)
	}
	sql, err := os.ReadFile(upFiles(t)[0])
	if err != nil {
		t.Fatal(err)
	}
	for path, code := range map[string]string{`"it's"`: "42602", "nowhere": "3F000"} {
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		cfg.RuntimeParams["search_path"] = path
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = conn.Exec(ctx, string(sql))
		conn.Close(ctx)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != code || !strings.Contains(pe.Message, "pgfence") {
			t.Errorf("search_path %s: %v, want SQLSTATE %s from pgfence", path, err, code)
		}
	}
	var n int
	if err := base.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname LIKE 'pgfence%'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("refused runs created %d relations (%v)", n, err)
	}
}
