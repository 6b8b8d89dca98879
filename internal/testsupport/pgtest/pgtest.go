package pgtest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/pgfence/pgfence/internal/testsupport/dbenv"
	"github.com/pgfence/pgfence/internal/testsupport/needtool"
)

var (
	server *dbenv.Server
	dbURL  string
)

// Main resolves the server, creates and migrates a database named
// pgfence_test_<random>, runs the tests (through needtool.Run, which says
// what did not run for want of a tool), drops the database and exits. When
// the tests pass, it also fails the package if a goroutine started during
// the tests is still running: every goroutine pgfence starts must end with
// its lease, pool or client. m is a *testing.M, or a wrapper around one
// whose Run does more.
func Main(m interface{ Run() int }) {
	os.Exit(run(leakChecked{m}))
}

// MainWithURL is Main for packages with go doc examples: while the tests
// and examples run, DATABASE_URL names the package's test database, so the
// examples connect as an application does (os.Getenv("DATABASE_URL")) and
// show no test helper.
func MainWithURL(m interface{ Run() int }) {
	Main(withURL{m})
}

type withURL struct{ m interface{ Run() int } }

func (w withURL) Run() int {
	os.Setenv("DATABASE_URL", URL())
	defer os.Unsetenv("DATABASE_URL")
	return w.m.Run()
}

type leakChecked struct{ m interface{ Run() int } }

func (l leakChecked) Run() int {
	before := goleak.IgnoreCurrent()
	code := needtool.Run(l.m)
	stopBouncer() // before the leak check: its process has a waiting goroutine
	if code == 0 {
		// golang-migrate leaves the goroutine that buffers a migration's
		// body blocked on a pipe when that migration fails (a test makes
		// Down fail on purpose). It is the library's, not ours.
		migrateBuffer := goleak.IgnoreAnyFunction("github.com/golang-migrate/migrate/v4.(*Migration).Buffer")
		if err := goleak.Find(before, migrateBuffer); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: goroutine leak:", err)
			return 1
		}
	}
	return code
}

func run(m leakChecked) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	var err error
	server, err = dbenv.Open(ctx, os.Stderr)
	if err != nil {
		cancel()
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer server.Close()
	url, drop, err := dbenv.CreateDatabase(ctx, server.URL, "pgfence_test_")
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: create a test database on %s: %v\n", server.Source, err)
		return 1
	}
	defer drop()
	dbURL = url
	return m.Run()
}

// URL is the package's test database. It is valid only after Main started.
func URL() string {
	if dbURL == "" {
		panic("pgtest: call pgtest.Main(m) from TestMain first")
	}
	return dbURL
}

// ServerURL is the admin URL of the server the test database lives on, for
// tests that create databases of their own.
func ServerURL() string { return server.URL }

// Pool opens a pool on the package's database and closes it when the test
// ends. Options may adjust the pool's config first.
func Pool(t testing.TB, opts ...func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	return poolOn(t, URL(), opts)
}

func poolOn(t testing.TB, url string, opts []func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range opts {
		o(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Step runs fn as the named subtest of a story test, and stops the story
// when it fails: later steps build on the state this one leaves. Parts of a
// test that do not depend on each other use t.Run, so every failure shows.
func Step(t *testing.T, name string, fn func(t *testing.T)) {
	t.Helper()
	if !t.Run(name, fn) {
		t.FailNow()
	}
}
