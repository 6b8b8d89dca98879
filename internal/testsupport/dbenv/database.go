package dbenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/migrations"
)

// CreateDatabase creates a fresh database named prefix + 12 random hex
// digits on the server at adminURL (whose role must be allowed to CREATE
// DATABASE), applies pgfence's migrations to it, and returns its URL and a
// function that drops it (WITH (FORCE), so open connections do not keep it).
func CreateDatabase(ctx context.Context, adminURL, prefix string) (url string, drop func(), err error) {
	cfg, err := pgx.ParseConfig(adminURL)
	if err != nil {
		return "", nil, err
	}
	admin, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return "", nil, err
	}
	defer admin.Close(ctx)
	var b [6]byte
	rand.Read(b[:])
	name := prefix + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, err
	}
	drop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.ConnectConfig(ctx, cfg); err == nil {
			c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
			c.Close(ctx)
		}
	}
	dbCfg := cfg.Copy()
	dbCfg.Database = name
	url = ConnString(dbCfg)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		drop()
		return "", nil, err
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		drop()
		return "", nil, err
	}
	return url, drop, nil
}

// ConnString rebuilds a URL from a parsed config (after its database was
// changed). Host may be a Unix socket directory; both go in the query.
func ConnString(cfg *pgx.ConnConfig) string {
	u := &url.URL{Scheme: "postgres", User: url.User(cfg.User), Path: "/" + cfg.Database}
	if cfg.Password != "" {
		u.User = url.UserPassword(cfg.User, cfg.Password)
	}
	q := url.Values{"host": {cfg.Host}, "port": {strconv.Itoa(int(cfg.Port))}}
	if cfg.TLSConfig == nil {
		q.Set("sslmode", "disable")
	}
	u.RawQuery = q.Encode()
	return u.String()
}
