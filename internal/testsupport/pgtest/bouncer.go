package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
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

	sessionOnce    sync.Once
	sessionBouncer *dbenv.Bouncer
	sessionErr     error
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

// SessionBouncerPool opens a pool on the package's test database through a
// PgBouncer in session pooling mode, started from the local pgbouncer
// binary on first use (never the one PGFENCE_BOUNCER_URL names) and stopped
// when the package's tests end; it skips or fails the test without the
// binary as BouncerURL does. The pool closes when the test ends.
func SessionBouncerPool(t testing.TB, opts ...func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	sessionOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		sessionBouncer, sessionErr = dbenv.StartBouncerMode(ctx, ServerURL(), "session", os.Stderr)
	})
	switch {
	case errors.Is(sessionErr, dbenv.ErrNoBouncer):
		needtool.Bouncer.Missing(t, sessionErr)
	case sessionErr != nil:
		t.Fatalf("pgtest: PgBouncer in session mode: %v", sessionErr)
	}
	cfg, err := pgx.ParseConfig(URL())
	if err != nil {
		t.Fatal(err)
	}
	return poolOn(t, sessionBouncer.URL(cfg.Database), opts)
}

// stopBouncer stops the bouncers BouncerURL and SessionBouncerPool started,
// if any.
func stopBouncer() {
	if bouncer != nil {
		bouncer.Close()
	}
	if sessionBouncer != nil {
		sessionBouncer.Close()
	}
}

// BouncerListening returns the channels each server session that the
// package's bouncer keeps for the test database LISTENs on
// (pg_listening_channels()), by the session's pid; a session that listens
// on none maps to an empty list. It takes the sessions from the bouncer's
// admin console (SHOW SERVERS; the test user must be one of its
// admin_users), then opens a transaction through the bouncer on one client
// connection after another and keeps each open, so that every next one
// runs on another server session, until it has run on each. Call it from a
// test that is not parallel: another test holding a server session meanwhile
// makes it fail.
func BouncerListening(t testing.TB) map[uint32][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(BouncerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	ac := BouncerAdmin(t)
	want, err := bouncerServers(ctx, ac, cfg.Database, cfg.User)
	if err != nil {
		t.Fatalf("pgtest: SHOW SERVERS: %v", err)
	}
	seen := map[uint32][]string{}
	var held []*pgx.Conn
	defer func() {
		for _, c := range held {
			c.Close(context.Background())
		}
	}()
	// A few more connections than sessions: one may land on a session the
	// bouncer opened meanwhile.
	for missing := len(want); missing > 0 && len(held) < len(want)+4; {
		c, err := pgx.ConnectConfig(ctx, cfg.Copy())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		var pid uint32
		var channels []string
		_, err = c.Exec(ctx, "BEGIN", pgx.QueryExecModeSimpleProtocol)
		if err == nil {
			err = c.QueryRow(ctx, "SELECT pg_backend_pid(), array(SELECT pg_listening_channels())::text[]",
				pgx.QueryExecModeSimpleProtocol).Scan(&pid, &channels)
		}
		if err != nil {
			t.Fatalf("pgtest: a transaction through the bouncer (is another test holding its server sessions?): %v", err)
		}
		if _, ok := seen[pid]; !ok && want[pid] {
			missing--
		}
		seen[pid] = channels
	}
	for pid := range want {
		if _, ok := seen[pid]; !ok {
			t.Fatalf("pgtest: no transaction through the bouncer ran on its server session %d", pid)
		}
	}
	return seen
}

// BouncerAdmin connects to the admin console of the package's bouncer (the
// database pgbouncer, simple protocol; the test user must be one of its
// admin_users) and closes the connection when the test ends.
func BouncerAdmin(t testing.TB) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(BouncerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = "pgbouncer"
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ac, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: PgBouncer's admin console (database pgbouncer, user %s in admin_users): %v", cfg.User, err)
	}
	t.Cleanup(func() { ac.Close(context.Background()) })
	return ac
}

// bouncerServers is the remote_pid of each server connection the bouncer
// behind ac (its admin console) has for database db and user.
func bouncerServers(ctx context.Context, ac *pgx.Conn, db, user string) (map[uint32]bool, error) {
	rows, err := ac.Query(ctx, "SHOW SERVERS")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	col := map[string]int{}
	for i, f := range rows.FieldDescriptions() {
		col[f.Name] = i
	}
	for _, name := range []string{"database", "user", "remote_pid"} {
		if _, ok := col[name]; !ok {
			return nil, fmt.Errorf("SHOW SERVERS has no column %s", name)
		}
	}
	pids := map[uint32]bool{}
	for rows.Next() {
		v := rows.RawValues()
		if string(v[col["database"]]) != db || string(v[col["user"]]) != user {
			continue
		}
		pid, err := strconv.ParseUint(string(v[col["remote_pid"]]), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("remote_pid %q: %w", v[col["remote_pid"]], err)
		}
		if pid != 0 {
			pids[uint32(pid)] = true
		}
	}
	return pids, rows.Err()
}
