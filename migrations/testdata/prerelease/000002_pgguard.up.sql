-- pgguard: the resource side of fencing.
--
--  * pgfence_enforce_fence(): the trigger function behind database-enforced
--    fencing (pgguard.InstallTrigger). It is installed per table, opt-in, as a
--    BEFORE UPDATE OR DELETE row trigger with two arguments: the mode
--    ('strict' or 'lenient') and the name of the table's fence column.
--  * payout_intents: durable intent rows for fence-ignorant side effects (the
--    payout scenario): PENDING -> SUBMITTING -> SUBMITTED / FAILED, every
--    transition guarded by fence and state (queries/guard.sql).

-- The transaction's fence is the transaction-local setting pgfence.fence
-- (pgguard.SetFence: set_config('pgfence.fence', fence, true)).
--
-- For each UPDATE or DELETE of a row:
--   * a fence is set and is older than the row's fence: refused, SQLSTATE
--     PF001 (stale fence);
--   * no fence is set: refused in strict mode, SQLSTATE PF002; allowed in
--     lenient mode;
--   * otherwise allowed. The trigger owns the fence column: whatever an
--     UPDATE wrote to it, the row's fence becomes the greater of its old
--     value and the transaction's fence (the old value when none is set).
--     A fenced UPDATE stamps its fence; no UPDATE lowers a row's fence or
--     raises it past a fence its transaction holds.
-- The DETAIL of a PF001 error is machine-readable for pgguard.Classify:
--   table=<schema.table> presented=<n> current=<n>
-- and the key of the row is not in it (the trigger does not know the key);
-- the HINT says what to do.
CREATE FUNCTION pgfence_enforce_fence() RETURNS trigger
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

CREATE TABLE payout_intents (
  payout_id        text        PRIMARY KEY CHECK (octet_length(payout_id) BETWEEN 1 AND 512),
  amount_cents     bigint      NOT NULL CHECK (amount_cents > 0),
  currency         text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
  state            text        NOT NULL DEFAULT 'PENDING'
                               CHECK (state IN ('PENDING', 'SUBMITTING', 'SUBMITTED', 'FAILED')),
  -- Derived once from payout_id when the row is created, sent on every
  -- attempt, never changed.
  idempotency_key  text        NOT NULL UNIQUE,
  provider_ref     text,
  failure_reason   text,
  attempts         integer     NOT NULL DEFAULT 0,
  last_fence       bigint      NOT NULL DEFAULT 0 CHECK (last_fence >= 0),
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now(),
  submitting_since timestamptz
);

-- Serves reconciliation: rows stuck in SUBMITTING, oldest first.
CREATE INDEX payout_intents_submitting_idx ON payout_intents (submitting_since)
  WHERE state = 'SUBMITTING';
