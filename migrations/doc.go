// Package migrations holds pgfence's schema as golang-migrate SQL files,
// embedded in the binary, and a small API to apply them.
//
// The files are exposed as an fs.FS (FS) so that an application may run them
// with its own tooling. Up, Down and Version run them with golang-migrate's
// pgx/v5 driver and record progress in their own table,
// pgfence_schema_migrations, so pgfence never collides with the application's
// own schema_migrations table.
//
// Up is idempotent (a second call is a no-op) and safe to run from several
// instances at once: golang-migrate's driver serialises them with a
// PostgreSQL advisory lock.
package migrations
