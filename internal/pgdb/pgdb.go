package pgdb

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/fencedb"
)

// DBTX is fencedb.DBTX: what sqlc-generated code and pgfence's hand-written
// statements run on (a pool, a connection or a transaction).
type DBTX = fencedb.DBTX

// Wrap returns db with every statement sent in Mode, with schema's name in
// it (none for "", the connection's search_path then finds the objects) and,
// when db is a *pgxpool.Pool, failing with a *NotSentError when no
// connection could be taken. schema must have passed validate.Identifier; it
// is quoted, never trusted. A nil db stays nil, so callers' nil checks keep
// working; a db Wrap returned is returned as it is.
func Wrap(db DBTX, schema string) DBTX { return wrap(db, schema, true) }

// WrapOwnMode is Wrap with every statement in db's own default exec mode:
// for a pool that reaches PostgreSQL directly (see Auto).
func WrapOwnMode(db DBTX, schema string) DBTX { return wrap(db, schema, false) }

// wrap is small enough to be inlined, so that a wrapper built per call (on
// a db passed per call) stays on the caller's stack and costs no allocation.
func wrap(db DBTX, schema string, mode bool) DBTX {
	switch d := db.(type) {
	case nil:
		return nil
	case wrapped:
		return d
	}
	pool, _ := db.(*pgxpool.Pool)
	return wrapped{db: db, pool: pool, schema: schema, mode: mode}
}

// wrapped is the whole stack in one value, so a statement pays one
// indirection, one allocation for its arguments (withMode) and, on a pool or
// with a schema, one for its row or rows.
type wrapped struct {
	db     DBTX
	pool   *pgxpool.Pool // db as a pool, else nil
	schema string        // "" for none
	mode   bool          // prepend Mode
}

func (w wrapped) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	sql, err := w.expand(sql)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	args = w.withMode(args)
	var tag pgconn.CommandTag
	if w.pool != nil {
		c, err := w.acquire(ctx)
		if err != nil {
			return pgconn.CommandTag{}, err
		}
		tag, err = c.Exec(ctx, sql, args...)
		c.Release()
		return tag, w.hint(err)
	}
	tag, err = w.db.Exec(ctx, sql, args...)
	return tag, w.hint(err)
}

func (w wrapped) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	sql, err := w.expand(sql)
	if err != nil {
		return nil, err
	}
	args = w.withMode(args)
	if w.pool == nil {
		r, err := w.db.Query(ctx, sql, args...)
		if err != nil || w.schema == "" {
			return r, w.hint(err)
		}
		return &rows{Rows: r, schema: w.schema}, nil
	}
	c, err := w.acquire(ctx)
	if err != nil {
		return nil, err
	}
	r, err := c.Query(ctx, sql, args...)
	if err != nil {
		c.Release()
		return nil, w.hint(err)
	}
	return &rows{Rows: r, c: c, schema: w.schema}, nil
}

func (w wrapped) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	sql, err := w.expand(sql)
	if err != nil {
		return errRow{err}
	}
	args = w.withMode(args)
	if w.pool == nil {
		r := w.db.QueryRow(ctx, sql, args...)
		if w.schema == "" {
			return r
		}
		return &row{row: r, schema: w.schema}
	}
	c, err := w.acquire(ctx)
	if err != nil {
		return errRow{err}
	}
	return &row{row: c.QueryRow(ctx, sql, args...), c: c, schema: w.schema}
}

func (w wrapped) expand(sql string) (string, error) {
	return Expand(sql, w.schema)
}

func (w wrapped) hint(err error) error {
	return Hint(err, w.schema)
}

// withMode puts Mode first. pgx reads leading QueryExecMode arguments as
// options and drops them before encoding the rest; with no other argument
// it uses the simple protocol, which is safe too. It copies args even
// without Mode, so that args never escapes: a caller's variadic arguments
// then stay on its stack, and a statement costs this one allocation.
func (w wrapped) withMode(args []any) []any {
	out := make([]any, 0, len(args)+1)
	if w.mode {
		out = append(out, Mode)
	}
	return append(out, args...)
}

func (w wrapped) acquire(ctx context.Context) (*pgxpool.Conn, error) {
	c, err := w.pool.Acquire(ctx)
	if err != nil {
		return nil, &NotSentError{Err: err}
	}
	return c, nil
}

// row gives the pool's connection back after Scan, as pgxpool's own row
// does, and adds the schema's hint to the error.
type row struct {
	row    pgx.Row
	c      *pgxpool.Conn // nil when db is not a pool
	schema string
}

func (r *row) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if r.c != nil {
		r.c.Release()
	}
	return Hint(err, r.schema)
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// rows gives the pool's connection back when the rows are closed, which pgx
// does by itself once Next reports the end, and adds the schema's hint to an
// error that arrives with the rows (the simple protocol reports a missing
// table there, not from Query).
type rows struct {
	pgx.Rows
	c      *pgxpool.Conn // nil when db is not a pool; set to nil once given back
	schema string
}

func (r *rows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *rows) Close() {
	r.Rows.Close()
	if r.c != nil {
		r.c.Release()
		r.c = nil
	}
}

func (r *rows) Err() error { return Hint(r.Rows.Err(), r.schema) }
