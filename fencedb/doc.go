// Package fencedb holds the typed query functions that sqlc generates from
// queries/*.sql for pgfence's tables. Each takes a [DBTX]: a *pgxpool.Pool, a
// *pgx.Conn or a pgx.Tx, so the same statement can run inside the caller's
// own transaction. DBTX is also what every other pgfence package takes.
//
// The lease statements judge expiry by the database's now(), which is the
// start time of the transaction they run in: run [Acquire], [Renew] and [Release]
// in their own short transaction, as package pglease does, never inside a
// long one.
//
// Everything here except this file is generated: edit queries/ and run
// `go tool -modfile=tools/go.mod sqlc generate`.
package fencedb
