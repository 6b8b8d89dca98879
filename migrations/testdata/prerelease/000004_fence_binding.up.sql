-- Fence binding and the fence ceiling.
--
-- 1. A transaction's fence is bound to the transaction. pgfence_set_fence(f)
--    stores the transaction-local setting pgfence.fence as '<f>@<xid>', where
--    xid is pg_current_xact_id() (64 bits, never reused). The fencing trigger
--    accepts only a value bound to the transaction it runs in. A value set at
--    session level (SET pgfence.fence, set_config(..., false)) would outlive
--    its transaction and, on a pooled connection, vouch for every later
--    transaction of every other client; a plain number (the old
--    set_config('pgfence.fence', f, true)) cannot be told apart from one. So
--    an UPDATE or DELETE of a fenced row under a pgfence.fence that is not
--    bound to its transaction is refused, in both modes, with SQLSTATE PF003.
--    Refused rather than treated as "no fence" in lenient mode: a writer
--    that sets a fence means to be fenced, and treating its fence as absent
--    would let its stale writes through and erase its stamp (the trigger
--    owns the fence column) without a word.
--
-- 2. The fence ceiling. A fence far above anything issued (say 2^62) would
--    be accepted once and then lock every real holder out of the rows it
--    stamped. pgfence_set_fence refuses, with SQLSTATE PF004, a fence above
--    pgfence_fence_ceiling(): the highest fence pgfence's source can have
--    issued so far. Users whose fences come from a source of their own call
--    pgfence_set_fence(f, false) (pgguard: WithOwnFenceSource).
--
-- Trust model: the binding and the ceiling stop mistakes (a leftover
-- setting, a made-up or corrupted fence passed through pgguard), not a role
-- that lies. Any role that can run SQL can write any value into
-- pgfence.fence, bound form included; keep roles you do not trust away from
-- UPDATE and DELETE on fenced tables.
--
-- Names relied on from earlier (or later) migrations: pgfence_timeline()
-- and the sequence pgfence_fence_seq (fence = timeline << 44 | sequence).

-- The highest fence pgfence's source can have issued: the current timeline
-- over the sequence's last value (0 before the first fence). Every fence
-- issued on an earlier timeline is below it too. Reading the sequence needs
-- USAGE or SELECT on it, as drawing a fence does.
-- Counts stale writes the trigger refuses. nextval is not rolled back with
-- the refused transaction, so the count survives where no row could
-- (pgfence serve exports it as pgfence_stale_refusals_total).
CREATE SEQUENCE pgfence_stale_refusals AS bigint;

CREATE FUNCTION pgfence_fence_ceiling() RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
  SELECT (pgfence_timeline() << 44) | coalesce(pg_sequence_last_value('pgfence_fence_seq'::regclass), 0)
$$;

-- Sets the fence of the current transaction, bound to it, and returns it.
-- check_ceiling (default true) refuses a fence above pgfence_fence_ceiling();
-- pass false only when your fences come from a source of your own.
CREATE FUNCTION pgfence_set_fence(fence bigint, check_ceiling boolean DEFAULT true) RETURNS bigint
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
    ceiling := pgfence_fence_ceiling();
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

-- The fencing trigger (see 000002), now accepting only a fence bound to the
-- current transaction. For each UPDATE or DELETE of a row:
--   * pgfence.fence is set but not bound to this transaction: refused,
--     SQLSTATE PF003, in both modes;
--   * a fence is set and is older than the row's fence: refused, PF001;
--   * no fence is set: refused in strict mode, PF002; allowed in lenient;
--   * otherwise allowed; an UPDATE's row fence becomes the greater of its
--     old value and the transaction's fence (the old value when none).
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
        PERFORM nextval('pgfence_stale_refusals');
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
