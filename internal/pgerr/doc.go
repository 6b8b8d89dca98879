// Package pgerr classifies PostgreSQL errors by SQLSTATE for pgfence's
// packages, so that each decision ("run the migrations", "retry", "a
// pooler broke a prepared statement") is made by one named predicate instead
// of code literals scattered across packages. The codes come from
// github.com/jackc/pgerrcode; pgfence's own codes (PF001 to PF008)
// are defined here.
//
// Every predicate looks for a *pgconn.PgError in err's chain: an error that
// holds none (a network failure, a context error) is not the server's
// answer, and only FromServer tells those apart.
package pgerr
