// Package catalog reads what pgfence's packages need to know about a
// caller's table from PostgreSQL's catalog: the table a name resolves to
// (through the search_path, as the caller's own SQL would), its columns and
// types, its unique indexes, and the tables that inherit from it.
//
// pgguard, claim and lockless check a caller's table here once, when a
// guard, claimer or helper is made, and word their own errors from what it
// returns. Its statements are in queries/internal/catalog.sql, which sqlc checks
// against pg_catalog; each goes through pgdb.Wrap, so it is safe behind a
// transaction pooler, and names are bound values (to_regclass), never SQL.
// After Resolve, the table is named by its OID: a later change of the
// search_path does not make the other readers look at another table.
package catalog
