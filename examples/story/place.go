package story

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/migrations"
)

// placePrefix begins the name of every database or schema an example makes.
const placePrefix = "pgfence_example_"

// insufficientPrivilege is SQLSTATE 42501.
const insufficientPrivilege = "42501"

// own is the example's own place on the server, and how to remove it.
type own struct {
	cfg   *pgxpool.Config
	where string // for humans
	drop  func()
}

// openOwn makes the example a place of its own on srv, with pgfence's
// migrations applied: a fresh database, or, when the role may not create
// databases, a fresh schema in the connection's database (every connection
// then sets search_path to it). drop removes it.
func openOwn(ctx context.Context, srv *Server) (*own, error) {
	cfg, err := pgxpool.ParseConfig(srv.ConnString)
	if err != nil {
		return nil, err
	}
	admin, err := pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy())
	if err != nil {
		return nil, err
	}
	defer admin.Close(ctx)
	name := placePrefix + randomHex()
	quoted := pgx.Identifier{name}.Sanitize()

	_, err = admin.Exec(ctx, "CREATE DATABASE "+quoted)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		cfg.ConnConfig.Database = name
		place := &own{cfg: cfg, where: "a fresh database", drop: func() {
			adminExec(srv, "DROP DATABASE IF EXISTS "+quoted+" WITH (FORCE)")
		}}
		return migrate(ctx, place)
	case !errors.As(err, &pgErr) || pgErr.Code != insufficientPrivilege:
		return nil, fmt.Errorf("creating a database of its own: %w", err)
	}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+quoted); err != nil {
		return nil, fmt.Errorf("the role may create neither a database nor a schema (it needs CREATEDB, or CREATE on the database): %w", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = name
	place := &own{cfg: cfg, where: fmt.Sprintf("schema %s of the connection's database (the role may not create databases)", name), drop: func() {
		adminExec(srv, "DROP SCHEMA IF EXISTS "+quoted+" CASCADE")
	}}
	return migrate(ctx, place)
}

// migrate applies pgfence's migrations to a new place and returns it; on
// failure it drops the place and returns nil.
func migrate(ctx context.Context, place *own) (*own, error) {
	pool, err := pgxpool.NewWithConfig(ctx, place.cfg.Copy())
	if err == nil {
		defer pool.Close()
		err = migrations.Up(ctx, pool)
	}
	if err != nil {
		place.drop()
		return nil, fmt.Errorf("applying pgfence's migrations: %w", err)
	}
	return place, nil
}

// adminExec runs one statement on a connection of its own to srv, with a
// context of its own: it removes the example's place at exit, after the
// example's context may have ended (Ctrl-C).
func adminExec(srv *Server, sql string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if c, err := pgx.Connect(ctx, srv.ConnString); err == nil {
		c.Exec(ctx, sql)
		c.Close(ctx)
	}
}

func randomHex() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// connString is a connection string for the place, for a program the
// example starts as a separate process: srv's, naming the place's database
// or schema.
func (o *own) connString(srv *Server) string {
	if schema, ok := o.cfg.ConnConfig.RuntimeParams["search_path"]; ok {
		return withSetting(srv.ConnString, "search_path", schema)
	}
	return withSetting(srv.ConnString, "dbname", o.cfg.ConnConfig.Database)
}
