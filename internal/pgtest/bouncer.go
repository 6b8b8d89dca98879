package pgtest

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/internal/dbenv"
)

// RequireBouncerVariable, when set (CI sets it), turns a missing pgbouncer
// binary into a test failure instead of a skip.
const RequireBouncerVariable = "PGFENCE_REQUIRE_BOUNCER"

var (
	bouncerOnce sync.Once
	bouncer     *dbenv.Bouncer
	bouncerErr  error
)

// BouncerURL is the package's test database reached through PgBouncer in
// transaction pooling mode: the one PGFENCE_BOUNCER_URL names (it must front
// the test server, with a wildcard database entry), or else one started from
// the local pgbouncer binary on first use and stopped when the package's
// tests end. Without a pgbouncer binary the test is skipped with a loud
// reason, or fails when PGFENCE_REQUIRE_BOUNCER is set.
func BouncerURL(t testing.TB) string {
	t.Helper()
	bouncerOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		bouncer, bouncerErr = dbenv.OpenBouncer(ctx, ServerURL(), os.Stderr)
	})
	switch {
	case errors.Is(bouncerErr, dbenv.ErrNoBouncer) && os.Getenv(RequireBouncerVariable) == "":
		t.Skipf("NOT TESTED BEHIND PGBOUNCER: %v", bouncerErr)
	case bouncerErr != nil:
		t.Fatalf("pgtest: PgBouncer: %v", bouncerErr)
	}
	cfg, err := pgx.ParseConfig(URL())
	if err != nil {
		t.Fatal(err)
	}
	return bouncer.URL(cfg.Database)
}

// stopBouncer stops the bouncer BouncerURL started, if any.
func stopBouncer() {
	if bouncer != nil {
		bouncer.Close()
	}
}
