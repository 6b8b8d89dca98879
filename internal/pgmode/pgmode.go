package pgmode

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Mode is the query exec mode of every statement pgfence sends through Wrap.
// It must not depend on server-session state (no named prepared
// statements), so that it is safe behind a transaction pooler.
const Mode = pgx.QueryExecModeCacheDescribe

// DBTX is what sqlc-generated code and pgfence's hand-written statements
// run on: a pool, a connection or a transaction.
type DBTX interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	Query(context.Context, string, ...any) (pgx.Rows, error)
	QueryRow(context.Context, string, ...any) pgx.Row
}

// Wrap returns db with Mode prepended to every statement's arguments. A nil
// db stays nil, so callers' nil checks keep working; wrapping twice is
// harmless.
func Wrap(db DBTX) DBTX {
	switch d := db.(type) {
	case nil:
		return nil
	case wrapped:
		return d
	}
	return wrapped{db}
}

type wrapped struct{ db DBTX }

func (w wrapped) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return w.db.Exec(ctx, sql, withMode(args)...)
}

func (w wrapped) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return w.db.Query(ctx, sql, withMode(args)...)
}

func (w wrapped) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return w.db.QueryRow(ctx, sql, withMode(args)...)
}

// withMode puts Mode first. pgx reads leading QueryExecMode arguments as
// options and drops them before encoding the rest; with no other argument
// it uses the simple protocol, which is safe too.
func withMode(args []any) []any {
	out := make([]any, 0, len(args)+1)
	out = append(out, Mode)
	return append(out, args...)
}
