package story

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Server is a PostgreSQL server an example runs on.
type Server struct {
	// ConnString connects to the server: a URL or keyword/value string; ""
	// leaves everything to libpq's environment.
	ConnString string
	// Source names the server and where it came from, for messages: "the
	// server DATABASE_URL names", "a throwaway PostgreSQL (...)".
	Source string
	// Close, when not nil, stops and removes the server: a fallback sets it
	// for a server it started.
	Close func() error
}

// A Fallback provides a server when no database URL is set and libpq's
// environment reaches none: the demo's starts a throwaway PostgreSQL. It
// reports its progress on log and gives up when ctx ends.
type Fallback func(ctx context.Context, log io.Writer) (*Server, error)

var fallback Fallback

// SetFallback registers f for Main to use when no server is reachable;
// call it from an init function. Without it, Main fails instead.
func SetFallback(f Fallback) { fallback = f }

// urlVariables name the environment variables that give the server's URL,
// first choice first.
var urlVariables = []string{"PGFENCE_DATABASE_URL", "DATABASE_URL"}

// howToSet is what a user without a reachable server is told to do.
const howToSet = "set DATABASE_URL (postgres://USER:PASSWORD@HOST:5432/DATABASE), or libpq's PGHOST, PGPORT, PGUSER, PGPASSWORD and PGDATABASE, " +
	"to a PostgreSQL server whose role may create databases (or schemas in its database)"

// reachTimeout bounds the first connection, so that a host that drops
// packets fails in seconds instead of hanging.
const reachTimeout = 10 * time.Second

// findServer resolves the server in the order the package's doc gives.
func findServer(ctx context.Context, log io.Writer) (*Server, error) {
	for _, name := range urlVariables {
		if v := strings.TrimSpace(os.Getenv(name)); v != "" {
			srv := &Server{ConnString: v, Source: "the server " + name + " names"}
			if err := reach(ctx, srv); err != nil {
				return nil, fmt.Errorf("%w\ncheck %s", err, name)
			}
			return srv, nil
		}
	}
	srv := &Server{Source: libpqSource()}
	err := reach(ctx, srv)
	switch {
	case err == nil:
		return srv, nil
	case fallback == nil || ctx.Err() != nil:
		return nil, fmt.Errorf("%w\n%s", err, howToSet)
	}
	fmt.Fprintf(log, "pgfence example: %v\npgfence example: using the fallback instead\n", err)
	return fallback(ctx, log)
}

// reach connects to srv once, so that an unreachable server is reported
// before anything else is tried. Its errors name the server by host, port,
// user and database; pgx's own errors already mask a password.
func reach(ctx context.Context, srv *Server) error {
	cfg, err := pgx.ParseConfig(srv.ConnString)
	if err != nil {
		return fmt.Errorf("%s: %w", srv.Source, err)
	}
	ctx, cancel := context.WithTimeout(ctx, reachTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("cannot connect to %s (%s): %w", srv.Source, describe(cfg), err)
	}
	return conn.Close(ctx)
}

// describe names a server for messages, without its password.
func describe(cfg *pgx.ConnConfig) string {
	db := cfg.Database
	if db == "" {
		db = cfg.User // what the server defaults to
	}
	return fmt.Sprintf("host %s, port %d, user %s, database %s", cfg.Host, cfg.Port, cfg.User, db)
}

// libpqVariables are the libpq environment variables that choose a server,
// a user or a database.
var libpqVariables = []string{"PGHOST", "PGHOSTADDR", "PGPORT", "PGUSER", "PGPASSWORD", "PGPASSFILE", "PGDATABASE", "PGSERVICE", "PGSSLMODE"}

// libpqSource names the server libpq's environment chooses, by the
// variables that are set (never their values).
func libpqSource() string {
	var set []string
	for _, v := range libpqVariables {
		if os.Getenv(v) != "" {
			set = append(set, v)
		}
	}
	if len(set) == 0 {
		return "the server libpq's defaults name (no DATABASE_URL or PG* variable is set)"
	}
	return "the server libpq's environment names (" + strings.Join(set, ", ") + ")"
}

// withSetting returns connString with one more setting, which overrides the
// same key given earlier in it (pgx reads a URL's query parameters after its
// path, and a later keyword after an earlier one).
func withSetting(connString, key, value string) string {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		if u, err := url.Parse(connString); err == nil {
			q := u.Query()
			q.Set(key, value)
			u.RawQuery = q.Encode()
			return u.String()
		}
	}
	return strings.TrimSpace(connString + " " + key + "='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(value) + "'")
}
