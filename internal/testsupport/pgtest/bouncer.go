package pgtest

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/internal/testsupport/dbenv"
	"github.com/pgfence/pgfence/internal/testsupport/needtool"
)

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
// reason (needtool.Bouncer), or fails when PGFENCE_REQUIRE_BOUNCER is set.
func BouncerURL(t testing.TB) string {
	t.Helper()
	bouncerOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		bouncer, bouncerErr = dbenv.OpenBouncer(ctx, ServerURL(), os.Stderr)
	})
	switch {
	case errors.Is(bouncerErr, dbenv.ErrNoBouncer):
		needtool.Bouncer.Missing(t, bouncerErr)
	case bouncerErr != nil:
		t.Fatalf("pgtest: PgBouncer: %v", bouncerErr)
	}
	cfg, err := pgx.ParseConfig(URL())
	if err != nil {
		t.Fatal(err)
	}
	return bouncer.URL(cfg.Database)
}

// BouncerPool opens a pool on BouncerURL (skipping or failing the test as
// BouncerURL does) and closes it when the test ends. Options may adjust the
// pool's config first; pgx's default query exec mode, which relies on named
// prepared statements, is left alone.
func BouncerPool(t testing.TB, opts ...func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	return poolOn(t, BouncerURL(t), opts)
}

// stopBouncer stops the bouncer BouncerURL started, if any.
func stopBouncer() {
	if bouncer != nil {
		bouncer.Close()
	}
}
