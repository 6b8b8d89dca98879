// Package fencesql holds pgfence's own statements on its tables: the
// plumbing behind packages pglease, claim, advisory, internal/catalog and
// cmd/pgfence (group and key-set acquisition, the recovery of an ambiguous
// acquisition, semaphores and queues, sweeps, claim internals, advisory
// locks, catalog reads, the serve and watch readers). Users never call
// them; what users call is in package fencedb.
//
// sqlc generates it from queries/internal/*.sql with exported statement
// constants, which packages that send a statement some other way (a
// pgx.Batch, a templated table) read. Its models are types of their own,
// not fencedb's.
//
// Everything here except this file is generated: edit queries/internal/ and
// run `go tool -modfile=tools/go.mod sqlc generate`.
package fencesql
