// Package sqltmpl turns a statement that sqlc checked against pgfence's
// schema into the same statement for other names: a caller's own jobs table
// and columns, or pgfence's objects in another schema. The statement keeps
// one source of truth, its .sql file in queries/; sqlc parses and checks the
// file as plain SQL, and this package rewrites only the places the file marks.
//
// Markers are block comments, so sqlc and PostgreSQL read them as whitespace:
//
//	/* TEMPLATE: table */pgfence_jobs   the table pgfence_jobs, or Names.Tables["pgfence_jobs"]
//	/* TEMPLATE: col */state            the column state, as Names.Columns["state"] names it
//	/* TEMPLATE: schema */pgfence_next_fence()
//	                                    the object in Names.Schema ("s".pgfence_next_fence), or as written
//	/* TEMPLATE_IF: queue */ AND /* TEMPLATE: col */queue = $4/* TEMPLATE_END */
//	                                    kept (without its markers) when Names.Columns["queue"] is
//	                                    not "", dropped when the table has no such column
//
// A table, col or schema marker is followed at once, without a space, by the
// name it marks, written as a plain lower-case identifier. Every table and
// column is replaced by its name quoted with pgx.Identifier.Sanitize; values
// are never put into the text (statements take bound parameters only).
// Nothing else in the text changes: an unmarked identifier, an alias such as
// x(id, fence), or a name inside a string literal stays as written, so a
// rename can never reach a place the file did not mark.
//
// A table marker whose name Names.Tables does not map is pgfence's own
// table: it gets the schema prefix, as a schema marker does. So putting
// pgfence's objects into a per-client schema needs only Names.Schema and a
// schema (or table) marker before each object name: pgfence_* functions,
// lock_leases, pgfence_jobs.
//
// Parse is strict so that a mistake in a .sql file fails its tests, not a
// user's claim: an unknown TEMPLATE marker, a marker without its name, an
// unclosed or nested section, or a column the Names do not map is an error.
// Expand refuses a column mapped to "" outside a TEMPLATE_IF section on it.
// Parameters ($1, $2, ...) are untouched, so a section must hold only the
// highest-numbered parameters: dropping it then leaves $1..$n contiguous.
//
// The sqlc-generated constants start with a "-- name: X :kind" line; Parse
// drops it, so the expanded text is the statement alone.
package sqltmpl
