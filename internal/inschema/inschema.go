package inschema

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/pgerr"
	"github.com/pgfence/pgfence/internal/sqltmpl"
)

// Wrap returns db with every statement's schema markers expanded for
// schema; db itself when schema is "" (the markers are comments, and the
// names are found through the search_path). schema must have passed
// validate.Identifier; it is quoted, never trusted.
func Wrap(db fencedb.DBTX, schema string) fencedb.DBTX {
	if schema == "" || db == nil {
		return db
	}
	return wrapped{db: db, cache: cacheFor(schema)}
}

// Expand is the statement sql for schema (sql itself for ""), from the cache
// Wrap uses: for statements sent some other way (a pgx.Batch).
func Expand(sql, schema string) (string, error) {
	if schema == "" {
		return sql, nil
	}
	return cacheFor(schema).get(sql)
}

// Hint returns err as a *MissingError when it says that an object of
// pgfence's is missing (undefined table or function, or no such schema: a
// function call names it first) and schema is set; err itself otherwise.
func Hint(err error, schema string) error {
	if err == nil || schema == "" || !(pgerr.IsUndefined(err) || pgerr.Is(err, pgerrcode.InvalidSchemaName)) {
		return err
	}
	return &MissingError{Schema: schema, Err: err}
}

// MissingError: a statement met no pgfence object in Schema, which was never
// migrated, or not to this version. Its message says what to run.
type MissingError struct {
	Schema string
	Err    error // the server's error
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("%v (pgfence's objects are missing from schema %q: run `pgfence migrate up --schema %s` or migrations.Up with migrations.WithSchema)",
		e.Err, e.Schema, e.Schema)
}

func (e *MissingError) Unwrap() error { return e.Err }

type wrapped struct {
	db    fencedb.DBTX
	cache *cache
}

func (w wrapped) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	s, err := w.cache.get(sql)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := w.db.Exec(ctx, s, args...)
	return tag, Hint(err, w.cache.names.Schema)
}

func (w wrapped) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	s, err := w.cache.get(sql)
	if err != nil {
		return nil, err
	}
	rows, err := w.db.Query(ctx, s, args...)
	if err != nil {
		return nil, Hint(err, w.cache.names.Schema)
	}
	return hintRows{rows, w.cache.names.Schema}, nil
}

func (w wrapped) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	s, err := w.cache.get(sql)
	if err != nil {
		return errRow{err}
	}
	return hintRow{w.db.QueryRow(ctx, s, args...), w.cache.names.Schema}
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

type hintRow struct {
	row    pgx.Row
	schema string
}

func (r hintRow) Scan(dest ...any) error { return Hint(r.row.Scan(dest...), r.schema) }

// hintRows adds the hint to an error that arrives with the rows (the simple
// protocol reports a missing table there, not from Query).
type hintRows struct {
	pgx.Rows
	schema string
}

func (r hintRows) Err() error { return Hint(r.Rows.Err(), r.schema) }

// cache holds one schema's expanded statements: sql text → expanded text.
// The statements are pgfence's own constants, a bounded set, so it never
// evicts.
type cache struct {
	names sqltmpl.Names
	m     sync.Map // string → string
}

var caches sync.Map // schema → *cache

func cacheFor(schema string) *cache {
	if c, ok := caches.Load(schema); ok {
		return c.(*cache)
	}
	c, _ := caches.LoadOrStore(schema, &cache{names: sqltmpl.Names{Schema: schema}})
	return c.(*cache)
}

func (c *cache) get(sql string) (string, error) {
	if s, ok := c.m.Load(sql); ok {
		return s.(string), nil
	}
	t, err := sqltmpl.Parse(sql)
	if err != nil {
		return "", err
	}
	s, err := t.Expand(c.names)
	if err != nil {
		return "", err
	}
	c.m.Store(sql, s)
	return s, nil
}
