// Package migrations holds pgfence's schema as plain SQL migration files,
// embedded in the binary, and a small API to apply them.
//
// The files (NNNNNN_name.up.sql / .down.sql, in golang-migrate's naming)
// are SQL that any tool applies as it is: psql, golang-migrate's own CLI,
// or the script `pgfence migrate sql` prints for goose, Atlas, Flyway or
// dbmate. [FS] serves them. Each file creates pgfence's objects unqualified,
// in the current schema of the session that runs it (the first existing
// schema of its search_path). So
//
//	for f in migrations/*.up.sql; do psql -v ON_ERROR_STOP=1 -f "$f"; done
//	migrate -path migrations -database 'pgx5://…?x-migrations-table=pgfence_schema_migrations' up
//
// and [Up] all make the same catalog. Giving golang-migrate's CLI
// x-migrations-table makes it record its progress where [Up], [Version] and
// the CLI read it; add search_path=S to its URL (or PGOPTIONS=-csearch_path=S
// for psql) to put pgfence into schema S.
//
// [Up], [Down], [Force] and [Version] run the files with golang-migrate's
// pgx/v5 driver and record progress in their own table,
// pgfence_schema_migrations, so pgfence never collides with the
// application's own schema_migrations table. Up is idempotent (a second
// call is a no-op) and safe to run from several instances at once:
// golang-migrate's driver serialises them with a PostgreSQL advisory lock.
// [Version] and [Inspect] only read; Inspect also recognises a schema that
// another tool applied, by its objects.
//
// By default the objects go to the first schema of the connection's
// search_path, under their plain names. [WithSchema] puts them, and the
// version table, into a schema of their own instead: Up runs the same files
// on connections whose search_path is that schema. The clients take the
// same schema as an option of their own (pglease.WithSchema,
// claim.WithSchema, pgguard.WithSchema (also for payouts.New), the CLI's
// --schema) and name the schema's objects in each statement, which needs no
// search_path and works behind a transaction pooler. For statements of
// one's own on direct connections, set the search_path of a pool's
// connections (pgxpool.Config's ConnConfig.RuntimeParams["search_path"]).
//
// # Writing a migration
//
// Function bodies must not depend on the search_path of the session that
// calls them (a client, or the fencing trigger of a table in another
// schema), so a body that names pgfence's objects names them qualified
// with the schema the migration runs in. PostgreSQL keeps a body as text
// and resolves its names at each call, so the schema is written into the
// body when the function is created, by a DO block:
//
//	DO $do$
//	BEGIN
//	  EXECUTE format($sql$
//	CREATE FUNCTION pgfence_example() RETURNS bigint
//	LANGUAGE sql VOLATILE
//	AS $fn$
//	  SELECT nextval('%1$I.pgfence_fence_seq') + 0 * %1$I.pgfence_timeline()
//	$fn$
//	$sql$, current_schema());
//	END
//	$do$;
//
// %1$I is the schema, quoted when it needs to be; a literal % in the body
// is written %% (RAISE messages, format strings). Tables, sequences and
// functions whose bodies name nothing of pgfence's are created with plain
// statements. Qualified names, not a SET search_path clause, because the
// planner inlines no LANGUAGE sql function that has one, and pgfence's
// fence draws are SQL functions so that they are inlined. Start each CREATE
// at the beginning of a line, as above: Inspect finds pgfence's objects by
// those lines. A file runs as one multi-statement query, so it applies
// whole or not at all; give it no BEGIN or COMMIT of its own. The down file
// drops what the up file creates, by plain names.
package migrations
