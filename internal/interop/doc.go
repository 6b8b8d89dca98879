// Package interop holds the tests that Go clients (pglease, pgguard) and
// clients in other languages (psql, Python with psycopg) share pgfence's
// keys through its SQL contract: pgfence_acquire, pgfence_renew,
// pgfence_release, the guarded-write predicate and the fencing trigger. It
// has no code of its own.
package interop
