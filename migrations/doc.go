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
// search_path, under their plain names. [WithSchema] puts them, and the
// version table, into a schema of their own instead. The clients take the
// same schema as an option of their own (pglease.WithSchema,
// claim.WithSchema, pgguard.WithSchema, payouts.WithSchema, the CLI's
// --schema) and name the schema's objects in each statement, which needs no
// search_path and works behind a transaction pooler. [UseSchema], which sets
// the search_path of a pool's connections, remains for statements of one's
// own on direct connections.
//
// Function bodies are independent of the caller's search_path (migration
// 000007): a name of pgfence's in a body is written after the marker
// /* TEMPLATE: schema */, and [Up] replaces every such marker, inside bodies
// and string literals too, with the schema the migration runs in
// (WithSchema's, else current_schema()) before golang-migrate reads the
// file. Names are qualified rather than fixed with SET search_path, which
// would stop the planner from inlining pgfence's SQL functions. [FS] serves
// the files with the markers removed.
package migrations
