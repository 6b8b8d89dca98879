-- Restores the fencing trigger of 000002 (a plain transaction-local
-- pgfence.fence, set_config('pgfence.fence', <fence>, true), is the
-- transaction's fence) and drops the fence binding and the ceiling.
CREATE OR REPLACE FUNCTION pgfence_enforce_fence() RETURNS trigger
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
              HINT = 'Set the transaction''s fence first: SELECT set_config(''pgfence.fence'', <fence>, true), or pgguard.SetFence. An operator may use a fresh fence, pgfence_next_fence(), which also locks out every current holder.';
    END IF;
    IF TG_OP = 'DELETE' THEN
      RETURN OLD;
    END IF;
    want := row_fence;  -- lenient and unfenced: allowed; the fence stays
  ELSE
    tx_fence := raw::bigint;
    IF tx_fence < row_fence THEN
      tbl := quote_ident(TG_TABLE_SCHEMA) || '.' || quote_ident(TG_TABLE_NAME);
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

DROP FUNCTION IF EXISTS pgfence_set_fence(bigint, boolean);
DROP FUNCTION IF EXISTS pgfence_fence_ceiling();

DROP SEQUENCE IF EXISTS pgfence_stale_refusals;
