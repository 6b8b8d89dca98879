package pgfence

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DBTX is what the packages' statements run on when the caller picks the
// connection or transaction: a *pgxpool.Pool, *pgxpool.Conn, *pgx.Conn or
// pgx.Tx. Pass a transaction to make a guarded write, a claim's completion or
// an enqueue part of the caller's own work, committed or rolled back with it.
// It is the method set of sqlc's generated DBTX for pgx, so either converts
// to the other.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}
