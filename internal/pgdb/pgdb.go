package pgdb

import (
	"context"
	"sync"

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
// is quoted, never trusted. db must not be nil; a DB passed back in (as a
// DBTX) is returned as it is.
func Wrap(db DBTX, schema string) DB { return wrap(db, schema, true) }

// WrapOwnMode is Wrap with every statement in db's own default exec mode:
// for a pool that reaches PostgreSQL directly (see Auto).
func WrapOwnMode(db DBTX, schema string) DB { return wrap(db, schema, false) }

// wrap is small enough to be inlined, and DB is a value whose methods let
// their arguments not escape: a DB built per call (on a db passed per call),
// or stored as a DB and called directly, then costs no allocation of its
// own, and the caller's variadic arguments stay on its stack.
func wrap(db DBTX, schema string, mode bool) DB {
	if d, ok := db.(DB); ok {
		return d
	}
	pool, _ := db.(*pgxpool.Pool)
	return DB{db: db, pool: pool, schema: schema, mode: mode}
}

// DB is the whole stack in one value, so a statement pays one indirection
// and one allocation, for its arguments (withMode); its row or rows, on a
// pool or with a schema, come from slabs. Store it as a DB, not as a DBTX,
// where it is called directly: a call through an interface makes the
// caller's arguments escape, one allocation more.
type DB struct {
	db     DBTX
	pool   *pgxpool.Pool // db as a pool, else nil
	schema string        // "" for none
	mode   bool          // prepend Mode
}

func (w DB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	sql, err := w.expand(sql)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	sent := w.withMode(args)
	var tag pgconn.CommandTag
	if w.pool != nil {
		c, err := w.acquire(ctx)
		if err != nil {
			return pgconn.CommandTag{}, err
		}
		tag, err = c.Exec(ctx, sql, sent...)
		err = hintFor(err, w.schema, c, w.db)
		c.Release()
		return tag, err
	}
	tag, err = w.db.Exec(ctx, sql, sent...)
	return tag, hintFor(err, w.schema, nil, w.db)
}

func (w DB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	sql, err := w.expand(sql)
	if err != nil {
		return nil, err
	}
	sent := w.withMode(args)
	if w.pool == nil {
		r, err := w.db.Query(ctx, sql, sent...)
		if err != nil || w.schema == "" {
			return r, hintFor(err, w.schema, nil, w.db)
		}
		return w.rows(r, nil), nil
	}
	c, err := w.acquire(ctx)
	if err != nil {
		return nil, err
	}
	r, err := c.Query(ctx, sql, sent...)
	if err != nil {
		err = hintFor(err, w.schema, c, w.db)
		c.Release()
		return nil, err
	}
	return w.rows(r, c), nil
}

func (w DB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	sql, err := w.expand(sql)
	if err != nil {
		return errRow{err}
	}
	sent := w.withMode(args)
	if w.pool == nil {
		r := w.db.QueryRow(ctx, sql, sent...)
		if w.schema == "" {
			return r
		}
		return w.row(r, nil)
	}
	c, err := w.acquire(ctx)
	if err != nil {
		return errRow{err}
	}
	return w.row(c.QueryRow(ctx, sql, sent...), c)
}

func (w DB) expand(sql string) (string, error) {
	return Expand(sql, w.schema)
}

// withMode puts Mode first. pgx reads leading QueryExecMode arguments as
// options and drops them before encoding the rest; with no other argument
// it uses the simple protocol, which is safe too. It copies args even
// without Mode, so that args never escapes (callers keep the copy in a
// variable of its own: assigned back to args, it would make args escape): a
// caller's variadic arguments then stay on its stack, and a statement costs
// this one allocation.
func (w DB) withMode(args []any) []any {
	out := make([]any, 0, len(args)+1)
	if w.mode {
		out = append(out, Mode)
	}
	return append(out, args...)
}

func (w DB) acquire(ctx context.Context) (*pgxpool.Conn, error) {
	c, err := w.pool.Acquire(ctx)
	if err != nil {
		return nil, &NotSentError{Err: err}
	}
	return c, nil
}

func (w DB) row(r pgx.Row, c *pgxpool.Conn) *row {
	out := rowSlabs.take()
	*out = row{row: r, c: c, db: w.db, schema: w.schema}
	return out
}

func (w DB) rows(r pgx.Rows, c *pgxpool.Conn) *rows {
	out := rowsSlabs.take()
	*out = rows{Rows: r, c: c, db: w.db, schema: w.schema}
	return out
}

// row gives the pool's connection back after Scan, as pgxpool's own row
// does, and adds the schema's hint to the error.
type row struct {
	row    pgx.Row
	c      *pgxpool.Conn // nil when db is not a pool
	db     DBTX          // the wrapped db, which says the role when c is nil
	schema string
}

func (r *row) Scan(dest ...any) error {
	err := hintFor(r.row.Scan(dest...), r.schema, r.c, r.db)
	if r.c != nil {
		r.c.Release()
	}
	return err
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
	db     DBTX          // the wrapped db, which says the role
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

func (r *rows) Err() error { return hintFor(r.Rows.Err(), r.schema, r.c, r.db) }

// slabs hands out values of T cut from arrays of slabSize, as pgxpool does
// for its own rows: a statement's row costs no allocation of its own (one
// per slabSize statements), and no value is ever handed out twice, so a
// caller that holds on to one never sees it reused.
type slabs[T any] struct{ p sync.Pool } // of *slab[T] with values left

const slabSize = 64

type slab[T any] struct {
	next  int
	items [slabSize]T
}

var (
	rowSlabs  slabs[row]
	rowsSlabs slabs[rows]
)

func (s *slabs[T]) take() *T {
	b, _ := s.p.Get().(*slab[T])
	if b == nil {
		b = new(slab[T])
	}
	v := &b.items[b.next]
	b.next++
	if b.next < slabSize {
		s.p.Put(b)
	}
	return v
}
