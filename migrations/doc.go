// Package migrations holds pgfence's schema as golang-migrate SQL files,
// embedded in the binary, and a small API to apply them.
//
// The files are exposed as an fs.FS ([FS]) so that an application may run them
// with its own tooling. [Up], [Down] and [Version] run them with golang-migrate's
// pgx/v5 driver and record progress in their own table,
// pgfence_schema_migrations, so pgfence never collides with the application's
// own schema_migrations table.
//
// Up is idempotent (a second call is a no-op) and safe to run from several
// instances at once: golang-migrate's driver serialises them with a
// PostgreSQL advisory lock.
//
// By default the objects go to the first schema of the connection's
// search_path, under their plain names. [WithSchema] puts them, and the version
// table, into a schema of their own instead; [UseSchema] points a pool's
// connections at it, so that every pgfence client on that pool uses it.
package migrations
