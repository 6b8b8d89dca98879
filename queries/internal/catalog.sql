-- Statements of internal/catalog: what pgfence reads about a caller's own
-- tables from pg_catalog. Sent as the generated constants, through pgdb.Wrap.

-- name: CatalogResolve :many
-- The relation name (quoted, possibly schema-qualified name) denotes, one
-- row per column in attnum order; one row with NULL column fields for a
-- relation without columns, no row when there is none. to_regclass reads
-- the name as SQL would (an unqualified name through the search_path).
SELECT c.oid, n.nspname::text, c.relname::text,
       pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(c.relname), c.relkind::text,
       a.attname::text, a.attnum, pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull
  FROM pg_catalog.pg_class c
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
 WHERE c.oid = pg_catalog.to_regclass(sqlc.arg(name))
 ORDER BY a.attnum;

-- name: CatalogUniqueIndexes :many
-- The unique indexes of relation relid, by name, each with its key
-- columns in key order ('' for an expression; INCLUDE columns left out).
SELECT ic.relname::text, i.indisvalid, i.indimmediate, i.indpred IS NOT NULL, i.indexprs IS NOT NULL,
       ARRAY(SELECT COALESCE(a.attname::text, '')
               FROM unnest(i.indkey) WITH ORDINALITY AS k(num, pos)
               LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.num AND k.num > 0
              WHERE k.pos <= i.indnkeyatts
              ORDER BY k.pos)
  FROM pg_catalog.pg_index i
  JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
 WHERE i.indrelid = sqlc.arg(relid) AND i.indisunique
 ORDER BY ic.relname;

-- name: CatalogInheritors :many
-- The tables that inherit from relation relid at any depth, partitions
-- left out, as schema.name quoted, in name order.
WITH RECURSIVE d(oid) AS (
  SELECT i.inhrelid FROM pg_catalog.pg_inherits i WHERE i.inhparent = sqlc.arg(relid)
  UNION
  SELECT i.inhrelid FROM pg_catalog.pg_inherits i JOIN d ON i.inhparent = d.oid
)
SELECT pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(c.relname)
  FROM d
  JOIN pg_catalog.pg_class c ON c.oid = d.oid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE NOT c.relispartition
 ORDER BY 1;

-- name: CatalogTriggerArgs :one
-- The arguments relation relid's trigger name was created with, each followed by
-- a NUL byte; no row when there is no such trigger.
SELECT tgargs FROM pg_catalog.pg_trigger WHERE tgrelid = sqlc.arg(relid) AND tgname = sqlc.arg(name);

-- name: CatalogFunctionExists :one
-- Whether signature (such as 'pgfence_next_fence()') names a
-- function, through the search_path when unqualified.
SELECT pg_catalog.to_regprocedure(sqlc.arg(signature)) IS NOT NULL;
