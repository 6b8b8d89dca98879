-- pgfence's functions independent of the caller's search_path (so that
-- all of pgfence's objects may live in a schema of the user's
-- choosing).
--
-- Before this migration the bodies named pgfence's objects unqualified, and
-- PostgreSQL resolves a name in a function body through the search_path of
-- the session that calls it: a client or a fenced table's trigger in a
-- session whose search_path did not name pgfence's schema failed ("function
-- pgfence_timeline() does not exist"), or worse, found another schema's
-- pgfence. Every reference to a pgfence object is now qualified with the
-- schema the migration runs in: package migrations fills in the schema
-- markers before each name when it runs the file (WithSchema's schema, else
-- current_schema()); see migrations/doc.go.
--
-- Qualified names rather than ALTER FUNCTION ... SET search_path: a SET
-- clause stops the planner from inlining a LANGUAGE sql function, and
-- pgfence_draw_fence, pgfence_next_fence and pgfence_commit_durably are SQL
-- functions for exactly that (migration 000005).
--
-- The bodies are otherwise those of migrations 000004 and 000005.

CREATE OR REPLACE FUNCTION /* TEMPLATE: schema */pgfence_draw_fence() RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
  SELECT /* TEMPLATE: schema */pgfence_timeline()::/* TEMPLATE: schema */pgfence_fence_timeline * 17592186044416 + nextval('/* TEMPLATE: schema */pgfence_fence_seq')
$$;

CREATE OR REPLACE FUNCTION /* TEMPLATE: schema */pgfence_next_fence() RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
  SELECT CASE
           WHEN /* TEMPLATE: schema */pgfence_commit_durably()
            AND (pg_current_xact_id_if_assigned() IS NOT NULL
                 OR pg_logical_emit_message(true, 'pgfence', '') IS NOT NULL)
           THEN /* TEMPLATE: schema */pgfence_draw_fence()
         END
$$;

CREATE OR REPLACE FUNCTION /* TEMPLATE: schema */pgfence_fence_ceiling() RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
  SELECT (/* TEMPLATE: schema */pgfence_timeline() << 44) | coalesce(pg_sequence_last_value('/* TEMPLATE: schema */pgfence_fence_seq'::regclass), 0)
$$;

CREATE OR REPLACE FUNCTION /* TEMPLATE: schema */pgfence_set_fence(fence bigint, check_ceiling boolean DEFAULT true) RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  ceiling bigint;
BEGIN
  IF fence IS NULL OR fence <= 0 THEN
    RAISE EXCEPTION 'pgfence: a fence must be positive, got %', coalesce(fence::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  IF check_ceiling IS DISTINCT FROM false THEN
    ceiling := /* TEMPLATE: schema */pgfence_fence_ceiling();
    IF fence > ceiling THEN
      RAISE EXCEPTION 'pgfence: fence % is above the highest fence pgfence has issued (%)', fence, ceiling
        USING ERRCODE = 'PF004',
              DETAIL = format('presented=%s ceiling=%s', fence, ceiling),
              HINT = 'Use the fence of a lease or claimed job (or pgfence_next_fence()), never a made-up one: a fence above every issued one would lock every real holder out of the rows it writes. If your fences come from a source of your own, call pgfence_set_fence(<fence>, false) (pgguard.WithOwnFenceSource).';
    END IF;
  END IF;
  PERFORM pg_catalog.set_config('pgfence.fence', fence::text || '@' || pg_catalog.pg_current_xact_id()::text, true);
  RETURN fence;
END
$$;

CREATE OR REPLACE FUNCTION /* TEMPLATE: schema */pgfence_enforce_fence() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
  mode      text := TG_ARGV[0];
  col       text := TG_ARGV[1];
  raw       text := nullif(current_setting('pgfence.fence', true), '');
  fast      boolean := TG_ARGV[1] = 'last_fence';  -- direct field access
  old_j     jsonb;
  tx_fence  bigint;
  row_fence bigint;
  new_fence bigint;
  want      bigint;
  tbl       text;
BEGIN
  IF TG_NARGS <> 2 OR mode NOT IN ('strict', 'lenient') THEN
    RAISE EXCEPTION 'pgfence: trigger % on %.% needs the arguments (''strict''|''lenient'', fence column)',
      TG_NAME, quote_ident(TG_TABLE_SCHEMA), quote_ident(TG_TABLE_NAME);
  END IF;
  -- The row's fence. For the default column name, read the field directly;
  -- for another name, through jsonb (plpgsql has no dynamic field access).
  IF fast THEN
    row_fence := OLD.last_fence;
  ELSE
    old_j := to_jsonb(OLD);
    IF NOT (old_j ? col) THEN
      RAISE EXCEPTION 'pgfence: trigger % on %.% names the fence column %, which the table does not have',
        TG_NAME, quote_ident(TG_TABLE_SCHEMA), quote_ident(TG_TABLE_NAME), quote_ident(col);
    END IF;
    row_fence := (old_j ->> col)::bigint;
  END IF;

  IF raw IS NULL THEN
    IF mode = 'strict' THEN
      tbl := quote_ident(TG_TABLE_SCHEMA) || '.' || quote_ident(TG_TABLE_NAME);
      RAISE EXCEPTION 'pgfence: % of a row of % without a fence (the table is fenced in strict mode)', TG_OP, tbl
        USING ERRCODE = 'PF002',
              DETAIL = format('table=%s current=%s', tbl, coalesce(row_fence::text, 'null')),
              HINT = 'Set the transaction''s fence first: SELECT pgfence_set_fence(<fence>), or pgguard.SetFence. An operator may use a fresh fence, SELECT pgfence_set_fence(pgfence_next_fence()), which also locks out every current holder.';
    END IF;
    IF TG_OP = 'DELETE' THEN
      RETURN OLD;
    END IF;
    want := row_fence;  -- lenient and unfenced: allowed; the fence stays
  ELSE
    -- Bound to this transaction: '<fence>@<this transaction's xid>'.
    IF split_part(raw, '@', 2) <> pg_catalog.pg_current_xact_id()::text THEN
      tbl := quote_ident(TG_TABLE_SCHEMA) || '.' || quote_ident(TG_TABLE_NAME);
      RAISE EXCEPTION 'pgfence: % of a row of % under pgfence.fence = %, which this transaction did not set with pgfence_set_fence', TG_OP, tbl, quote_literal(raw)
        USING ERRCODE = 'PF003',
              DETAIL = format('table=%s current=%s', tbl, coalesce(row_fence::text, 'null')),
              HINT = 'A fence counts only in the transaction that set it with SELECT pgfence_set_fence(<fence>) (pgguard.SetFence, RunFenced). A session-level SET pgfence.fence or set_config(''pgfence.fence'', ..., false) outlives its transaction and, on a pooled connection, would vouch for other clients; a plain set_config(''pgfence.fence'', ...) is not bound to a transaction. RESET pgfence.fence on this connection and set the fence in the transaction that writes.';
    END IF;
    tx_fence := split_part(raw, '@', 1)::bigint;
    IF tx_fence < row_fence THEN
      tbl := quote_ident(TG_TABLE_SCHEMA) || '.' || quote_ident(TG_TABLE_NAME);
      -- Count the refusal; a role without USAGE on the counter still gets
      -- the refusal it is owed, only uncounted.
      BEGIN
        PERFORM nextval('/* TEMPLATE: schema */pgfence_stale_refusals');
      EXCEPTION WHEN insufficient_privilege THEN
        NULL;
      END;
      RAISE EXCEPTION 'pgfence: stale fence % for % of a row of %: the row carries fence %', tx_fence, TG_OP, tbl, row_fence
        USING ERRCODE = 'PF001',
              DETAIL = format('table=%s presented=%s current=%s', tbl, tx_fence, row_fence),
              HINT = 'A newer holder has written this row: this transaction''s holder lost its lease. Abandon the attempt; do not retry with the same fence.';
    END IF;
    IF TG_OP = 'DELETE' THEN
      RETURN OLD;
    END IF;
    want := greatest(row_fence, tx_fence);  -- a fenced UPDATE stamps its fence
  END IF;

  -- UPDATE: the trigger owns the fence column. Whatever the statement
  -- wrote to it, the row's fence becomes the greater of its old value and
  -- the transaction's fence: it can be neither lowered nor raised past a
  -- fence the transaction holds (which would lock out legitimate holders).
  IF fast THEN
    IF NEW.last_fence IS DISTINCT FROM want THEN
      NEW.last_fence := want;
    END IF;
  ELSE
    new_fence := (to_jsonb(NEW) ->> col)::bigint;
    IF new_fence IS DISTINCT FROM want THEN
      NEW := jsonb_populate_record(NEW, jsonb_build_object(col, want));
    END IF;
  END IF;
  RETURN NEW;
END
$$;
