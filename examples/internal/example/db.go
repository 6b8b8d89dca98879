package example

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/internal/testsupport/dbenv"
	"github.com/pgfence/pgfence/migrations"
)

// own is the example's own place on the server, and how to remove it.
type own struct {
	cfg   *pgxpool.Config
	where string // for humans
	drop  func()
}

// openOwn makes the example a place of its own on the server at serverURL,
// with pgfence's migrations applied: a fresh database, or, when the role may
// not create databases, a fresh schema in the URL's database (every
// connection then sets search_path to it). drop removes it.
func openOwn(ctx context.Context, serverURL string) (*own, error) {
	url, drop, err := dbenv.CreateDatabase(ctx, serverURL, "pgfence_example_")
	if err == nil {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			drop()
			return nil, err
		}
		return &own{cfg: cfg, where: "a fresh database", drop: drop}, nil
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.InsufficientPrivilege {
		return nil, fmt.Errorf("creating a database of its own: %w", err)
	}
	return openSchema(ctx, serverURL)
}

func openSchema(ctx context.Context, serverURL string) (*own, error) {
	cfg, err := pgxpool.ParseConfig(serverURL)
	if err != nil {
		return nil, err
	}
	var b [6]byte
	rand.Read(b[:])
	schema := "pgfence_example_" + hex.EncodeToString(b[:])
	quoted := pgx.Identifier{schema}.Sanitize()
	admin, err := pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy())
	if err != nil {
		return nil, err
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+quoted); err != nil {
		return nil, fmt.Errorf("the role may create neither a database nor a schema (it needs CREATEDB, or CREATE on the database): %w", err)
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy()); err == nil {
			c.Exec(ctx, "DROP SCHEMA IF EXISTS "+quoted+" CASCADE")
			c.Close(ctx)
		}
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg.Copy())
	if err != nil {
		drop()
		return nil, err
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		drop()
		return nil, err
	}
	return &own{cfg: cfg, where: fmt.Sprintf("schema %s of the given database (the role may not create databases)", schema), drop: drop}, nil
}
