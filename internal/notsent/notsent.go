package notsent

import (
	"context"
	"errors"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/fencedb"
)

// Error is a failure to take a pool connection: the statement was not sent.
type Error struct{ Err error }

func (e *Error) Error() string { return "no connection from the pool: " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether err says that its statement was never sent.
func Is(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// Wrap returns pool as a fencedb.DBTX whose statements fail with an *Error
// when no connection could be taken.
func Wrap(pool *pgxpool.Pool) fencedb.DBTX { return wrapped{pool} }

type wrapped struct{ pool *pgxpool.Pool }

func (w wrapped) acquire(ctx context.Context) (*pgxpool.Conn, error) {
	c, err := w.pool.Acquire(ctx)
	if err != nil {
		return nil, &Error{Err: err}
	}
	return c, nil
}

func (w wrapped) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c, err := w.acquire(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer c.Release()
	return c.Exec(ctx, sql, args...)
}

func (w wrapped) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c, err := w.acquire(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := c.Query(ctx, sql, args...)
	if err != nil {
		c.Release()
		return nil, err
	}
	return &connRows{Rows: rows, c: c}, nil
}

func (w wrapped) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c, err := w.acquire(ctx)
	if err != nil {
		return errRow{err}
	}
	return connRow{row: c.QueryRow(ctx, sql, args...), c: c}
}

// connRows gives the connection back when the rows are closed, which
// pgx does by itself once Next reports the end.
type connRows struct {
	pgx.Rows
	c    *pgxpool.Conn
	once sync.Once
}

func (r *connRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *connRows) Close() {
	r.Rows.Close()
	r.once.Do(r.c.Release)
}

// connRow gives the connection back after Scan, as pgxpool's own row does.
type connRow struct {
	row pgx.Row
	c   *pgxpool.Conn
}

func (r connRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	r.c.Release()
	return err
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
