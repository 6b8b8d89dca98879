-- pgfence's schema: the fence source, leases, the fencing trigger, payout
-- intents, jobs, and the SQL functions other languages share with Go.
--
-- Plain SQL, applied as it is by psql, golang-migrate (pgfence migrate up,
-- or its own CLI) or any migration tool. Every object goes into the
-- session's current schema (the first existing schema of its search_path):
-- choose one with SET search_path, psql's PGOPTIONS, golang-migrate's
-- search_path URL parameter, or pgfence migrate --schema.
--
-- Function bodies that name pgfence's objects name them qualified with that
-- schema, so that they find pgfence's objects whatever the search_path of
-- the session that calls them (a client, or the trigger of a table in
-- another schema). A body is text that PostgreSQL resolves at each call, so
-- the schema is written into it when it is created: such a function is
-- created by a DO block that runs
--
--     EXECUTE format($sql$ CREATE FUNCTION ... %1$I.pgfence_fence_seq ... $sql$, current_schema());
--
-- in which %1$I is the schema, quoted when it needs to be, and a literal %
-- of the body is written %%. Qualified names, rather than a SET search_path
-- clause on the function, keep the LANGUAGE sql functions below inlinable:
-- the planner inlines no function that has a SET clause.

-- Refuse a session with no schema to create in, and a schema name that
-- cannot be written into a function body (inside nextval('...') literals
-- and $fn$-quoted bodies).
DO $do$
BEGIN
  IF current_schema() IS NULL THEN
    RAISE EXCEPTION 'pgfence: the search_path (%) names no existing schema to create pgfence''s objects in', current_setting('search_path')
      USING ERRCODE = '3F000', HINT = 'CREATE SCHEMA the schema first, or SET search_path to an existing one.';
  END IF;
  IF strpos(current_schema(), '''') > 0 OR strpos(current_schema(), '$') > 0 THEN
    RAISE EXCEPTION 'pgfence: the schema name % holds a quote or a dollar sign; choose another schema for pgfence', quote_ident(current_schema())
      USING ERRCODE = '42602';
  END IF;
END
$do$;

-- The fence source.
--
-- A fencing token must never repeat and never go backwards for a key,
-- across release, deletion of the lease row, a crash-restart and the
-- promotion of an asynchronous standby. So a fence is not a per-row
-- counter. It is
--
--     fence = timeline * 2^44 + nextval('pgfence_fence_seq')
--
--   * the sequence survives deletion of rows (a per-row counter restarts at 1);
--   * a sequence value is WAL-logged before it is handed out, and every
--     fence draw commits durably, so after a crash the sequence resumes above
--     every fence that was ever granted;
--   * a promoted standby may have missed the newest sequence values, but its
--     WAL timeline is higher than the old primary's, so every fence it issues
--     is above every fence the old primary issued.
-- 44 bits of sequence are 17.6e12 grants; 19 bits of timeline are 524,287
-- promotions. Both limits raise an error instead of wrapping.
CREATE SEQUENCE pgfence_fence_seq AS bigint MINVALUE 1 MAXVALUE 17592186044415 NO CYCLE;

-- The timeline part of a fence. Its check is the overflow error: a timeline of
-- 2^19 or more would not fit in the 19 bits above the sequence. A domain check
-- costs one comparison inside the calling statement.
CREATE DOMAIN pgfence_fence_timeline AS bigint
  CONSTRAINT pgfence_timeline_fits_in_a_fence CHECK (VALUE BETWEEN 0 AND 524287);

-- The server's current WAL timeline. pg_walfile_name is readable by a plain
-- role (pg_control_checkpoint() is not), and pg_current_wal_lsn() refuses to
-- run on a standby, which is right: only a primary may grant.
CREATE FUNCTION pgfence_timeline() RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
  SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint
$$;

-- Makes the calling transaction commit durably: a session or database whose
-- synchronous_commit is off gets it raised to on for this transaction only;
-- any other setting (on, local, remote_write, remote_apply) already flushes
-- the local WAL at commit and is left as it is. Always true. A LANGUAGE sql
-- function whose body is one expression is inlined by the planner into the
-- statement that calls it, so it costs no function call of its own.
CREATE FUNCTION pgfence_commit_durably() RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
  SELECT CASE current_setting('synchronous_commit')
           WHEN 'off' THEN set_config('synchronous_commit', 'on', true) = 'on'
           ELSE true
         END
$$;

-- Counts stale writes the fencing trigger refuses. nextval is not rolled
-- back with the refused transaction, so the count survives where no row
-- could (pgfence serve exports it as pgfence_stale_refusals_total).
CREATE SEQUENCE pgfence_stale_refusals AS bigint;

DO $do$
BEGIN
  -- The fence arithmetic alone, inlined into the statement that calls it.
  -- It does NOT make the draw durable. It is for statements that store the
  -- fence in a row and force a durable commit themselves (the lease
  -- acquisition): such a commit flushes the WAL up to its own commit record,
  -- which includes the sequence's WAL. Everything else uses
  -- pgfence_next_fence().
  EXECUTE format($sql$
CREATE FUNCTION pgfence_draw_fence() RETURNS bigint
LANGUAGE sql VOLATILE
AS $fn$
  SELECT %1$I.pgfence_timeline()::%1$I.pgfence_fence_timeline * 17592186044416 + nextval('%1$I.pgfence_fence_seq')
$fn$
$sql$, current_schema());

  -- The never-repeating fence source for every other use: NextFence, job
  -- claims, an operator's fresh fence, your own SQL. Whatever the session's
  -- synchronous_commit, the fence it returns survives a crash:
  --
  --   * pgfence_commit_durably() makes the transaction's commit flush the WAL;
  --   * but nextval() writes WAL only once per 32 values, and a transaction
  --     that writes no WAL has nothing to flush: a plain SELECT
  --     pgfence_next_fence() commits without touching the disk. Its value is
  --     covered by the WAL record of the draw that logged the batch, and that
  --     record is unflushed if that draw's transaction rolled back (rollbacks
  --     never wait for the disk). A crash then restarts the sequence below
  --     values already handed out. So a transaction that has no transaction
  --     id yet (has written nothing) writes one small transactional WAL
  --     record of its own, a logical decoding message with the prefix
  --     'pgfence', so that its commit flushes the WAL up to and past the
  --     sequence's record. Logical decoding consumers see these messages only
  --     if they ask for messages; they carry no content.
  --
  -- A statement that writes rows and calls this once per row (a claim of
  -- many jobs) writes that record once: the first row's write assigns the
  -- transaction id.
  EXECUTE format($sql$
CREATE FUNCTION pgfence_next_fence() RETURNS bigint
LANGUAGE sql VOLATILE
AS $fn$
  SELECT CASE
           WHEN %1$I.pgfence_commit_durably()
            AND (pg_current_xact_id_if_assigned() IS NOT NULL
                 OR pg_logical_emit_message(true, 'pgfence', '') IS NOT NULL)
           THEN %1$I.pgfence_draw_fence()
         END
$fn$
$sql$, current_schema());

  -- The highest fence pgfence's source can have issued: the current timeline
  -- over the sequence's last value (0 before the first fence). Every fence
  -- issued on an earlier timeline is below it too. Reading the sequence needs
  -- USAGE or SELECT on it, as drawing a fence does.
  EXECUTE format($sql$
CREATE FUNCTION pgfence_fence_ceiling() RETURNS bigint
LANGUAGE sql VOLATILE
AS $fn$
  SELECT (%1$I.pgfence_timeline() << 44) | coalesce(pg_sequence_last_value('%1$I.pgfence_fence_seq'::regclass), 0)
$fn$
$sql$, current_schema());
END
$do$;

-- Leases: one row per key, held while expires_at > now() by the database
-- clock. No CHECK constraints: PostgreSQL plans a table's CHECK constraints
-- again in every INSERT and UPDATE statement, which on this table cost a
-- sixth of the server's CPU per acquire + release. Every fence comes from
-- pgfence_fence_seq, which starts at 1 and never cycles; keys are checked
-- (1 to 512 bytes) by pglease and by pgfence_acquire before they are stored.
-- No index on expires_at either: every acquire, renew and release rewrites
-- it, and with an index on it no such update could be a HOT update (one
-- that adds no index entries). The sweep of long-expired rows walks the
-- primary key instead.
CREATE TABLE lock_leases (
  lock_key    text        PRIMARY KEY,
  owner       text        NOT NULL,            -- for humans and dashboards
  owner_token text        NOT NULL,            -- random per acquisition: resolves ambiguous outcomes
  fence       bigint      NOT NULL,
  acquired_at timestamptz NOT NULL,
  expires_at  timestamptz NOT NULL
);

-- Tombstones for acquisitions whose caller gave up. An acquisition whose
-- answer was lost may still reach the server later (held in a network buffer,
-- a retransmission queue or a proxy's queue): the caller that gave up on it
-- records its owner token here, and the acquire statement never grants under
-- a recorded token. pglease's SweepExpired deletes tombstones older than an
-- hour (pglease.AbandonedTokenRetention): far longer than a request can wait
-- in TCP retransmission (Linux gives up after about 15 minutes) or in
-- PgBouncer's queue (query_wait_timeout, 120 s by default). Rows appear only
-- when an acquisition's outcome was ambiguous, so the table stays tiny; the
-- sweep reads it whole, so it has no index on abandoned_at.
CREATE TABLE pgfence_abandoned_tokens (
  owner_token  text        PRIMARY KEY,
  abandoned_at timestamptz NOT NULL DEFAULT now()
);

-- The fencing side: a transaction's fence, and the trigger that refuses
-- writes of stale holders.
--
-- pgfence_set_fence(f) sets the fence of the current transaction, bound to
-- it: the transaction-local setting pgfence.fence becomes '<f>@<xid>', where
-- xid is pg_current_xact_id() (64 bits, never reused), and it returns f. The
-- fencing trigger accepts only a value bound to the transaction it runs in:
-- a value set at session level (SET pgfence.fence, set_config(..., false))
-- would outlive its transaction and, on a pooled connection, vouch for every
-- later transaction of every other client.
--
-- check_ceiling (default true) refuses, with SQLSTATE PF004, a fence above
-- pgfence_fence_ceiling(): a fence far above anything issued (say 2^62)
-- would be accepted once and then lock every real holder out of the rows it
-- stamped. Pass false only when your fences come from a source of your own.
--
-- pgfence_enforce_fence() is the trigger function behind database-enforced
-- fencing (pgguard.InstallTrigger). It is installed per table, opt-in, as a
-- BEFORE UPDATE OR DELETE row trigger with two arguments: the mode ('strict'
-- or 'lenient') and the name of the table's fence column. For each UPDATE or
-- DELETE of a row:
--   * pgfence.fence is set but not bound to this transaction: refused,
--     SQLSTATE PF003, in both modes (a writer that sets a fence means to be
--     fenced; treating its fence as absent would let its stale writes
--     through);
--   * a fence is set and is older than the row's fence: refused, PF001;
--   * no fence is set: refused in strict mode, PF002; allowed in lenient;
--   * otherwise allowed. The trigger owns the fence column: whatever an
--     UPDATE wrote to it, the row's fence becomes the greater of its old
--     value and the transaction's fence (the old value when none is set).
-- The DETAIL of a PF001 error is machine-readable for pgguard.Classify:
--   table=<schema.table> presented=<n> current=<n>
-- and the HINT says what to do.
--
-- Trust model: the binding and the ceiling stop mistakes (a leftover
-- setting, a made-up or corrupted fence), not a role that lies. Any role
-- that can run SQL can write any value into pgfence.fence, bound form
-- included; keep roles you do not trust away from UPDATE and DELETE on
-- fenced tables.
DO $do$
BEGIN
  EXECUTE format($sql$
CREATE FUNCTION pgfence_set_fence(fence bigint, check_ceiling boolean DEFAULT true) RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
  ceiling bigint;
BEGIN
  IF fence IS NULL OR fence <= 0 THEN
    RAISE EXCEPTION 'pgfence: a fence must be positive, got %%', coalesce(fence::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  IF check_ceiling IS DISTINCT FROM false THEN
    ceiling := %1$I.pgfence_fence_ceiling();
    IF fence > ceiling THEN
      RAISE EXCEPTION 'pgfence: fence %% is above the highest fence pgfence has issued (%%)', fence, ceiling
        USING ERRCODE = 'PF004',
              DETAIL = format('presented=%%s ceiling=%%s', fence, ceiling),
              HINT = 'Use the fence of a lease or claimed job (or pgfence_next_fence()), never a made-up one: a fence above every issued one would lock every real holder out of the rows it writes. If your fences come from a source of your own, call pgfence_set_fence(<fence>, false) (pgguard.WithOwnFenceSource).';
    END IF;
  END IF;
  PERFORM pg_catalog.set_config('pgfence.fence', fence::text || '@' || pg_catalog.pg_current_xact_id()::text, true);
  RETURN fence;
END
$fn$
$sql$, current_schema());

  EXECUTE format($sql$
CREATE FUNCTION pgfence_enforce_fence() RETURNS trigger
LANGUAGE plpgsql
AS $fn$
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
    RAISE EXCEPTION 'pgfence: trigger %% on %%.%% needs the arguments (''strict''|''lenient'', fence column)',
      TG_NAME, quote_ident(TG_TABLE_SCHEMA), quote_ident(TG_TABLE_NAME);
  END IF;
  -- The row's fence. For the default column name, read the field directly;
  -- for another name, through jsonb (plpgsql has no dynamic field access).
  IF fast THEN
    row_fence := OLD.last_fence;
  ELSE
    old_j := to_jsonb(OLD);
    IF NOT (old_j ? col) THEN
      RAISE EXCEPTION 'pgfence: trigger %% on %%.%% names the fence column %%, which the table does not have',
        TG_NAME, quote_ident(TG_TABLE_SCHEMA), quote_ident(TG_TABLE_NAME), quote_ident(col);
    END IF;
    row_fence := (old_j ->> col)::bigint;
  END IF;

  IF raw IS NULL THEN
    IF mode = 'strict' THEN
      tbl := quote_ident(TG_TABLE_SCHEMA) || '.' || quote_ident(TG_TABLE_NAME);
      RAISE EXCEPTION 'pgfence: %% of a row of %% without a fence (the table is fenced in strict mode)', TG_OP, tbl
        USING ERRCODE = 'PF002',
              DETAIL = format('table=%%s current=%%s', tbl, coalesce(row_fence::text, 'null')),
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
      RAISE EXCEPTION 'pgfence: %% of a row of %% under pgfence.fence = %%, which this transaction did not set with pgfence_set_fence', TG_OP, tbl, quote_literal(raw)
        USING ERRCODE = 'PF003',
              DETAIL = format('table=%%s current=%%s', tbl, coalesce(row_fence::text, 'null')),
              HINT = 'A fence counts only in the transaction that set it with SELECT pgfence_set_fence(<fence>) (pgguard.SetFence, RunFenced). A session-level SET pgfence.fence or set_config(''pgfence.fence'', ..., false) outlives its transaction and, on a pooled connection, would vouch for other clients; a plain set_config(''pgfence.fence'', ...) is not bound to a transaction. RESET pgfence.fence on this connection and set the fence in the transaction that writes.';
    END IF;
    tx_fence := split_part(raw, '@', 1)::bigint;
    IF tx_fence < row_fence THEN
      tbl := quote_ident(TG_TABLE_SCHEMA) || '.' || quote_ident(TG_TABLE_NAME);
      -- Count the refusal; a role without USAGE on the counter still gets
      -- the refusal it is owed, only uncounted.
      BEGIN
        PERFORM nextval('%1$I.pgfence_stale_refusals');
      EXCEPTION WHEN insufficient_privilege THEN
        NULL;
      END;
      RAISE EXCEPTION 'pgfence: stale fence %% for %% of a row of %%: the row carries fence %%', tx_fence, TG_OP, tbl, row_fence
        USING ERRCODE = 'PF001',
              DETAIL = format('table=%%s presented=%%s current=%%s', tbl, tx_fence, row_fence),
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
$fn$
$sql$, current_schema());
END
$do$;

-- Durable intent rows for fence-ignorant side effects (package payouts):
-- PENDING -> SUBMITTING -> SUBMITTED / FAILED, every transition guarded by
-- fence and state.
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

-- A ready-made jobs table (package claim). A job row is owned by one worker
-- at a time through a per-row lease and a per-row fence:
--
--   claim   : available -> running, attempt + 1, fence = pgfence_next_fence(),
--             owner, expires_at = now() + TTL (all in ONE statement that
--             picks rows FOR UPDATE SKIP LOCKED in priority, run_at, id order)
--   every later write by the worker (renew, complete, fail, release)
--             matches id + fence + state = 'running'; zero rows = lease lost
--   rescue  : running rows whose expires_at <= now() go back to available
--             (or to dead after max_attempts) in ONE guarded UPDATE
--
-- The fence never repeats: a worker whose job was rescued and claimed again
-- can never complete, fail, renew or release the new attempt.
--
-- States: available (waiting for run_at), running (leased), completed,
-- dead (failed max_attempts times, or its lease expired on the last attempt).
CREATE TABLE pgfence_jobs (
  id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  queue        text        NOT NULL DEFAULT 'default' CHECK (octet_length(queue) BETWEEN 1 AND 128),
  kind         text        NOT NULL DEFAULT '',
  payload      jsonb       NOT NULL DEFAULT '{}',
  state        text        NOT NULL DEFAULT 'available'
                           CHECK (state IN ('available', 'running', 'completed', 'dead')),
  priority     integer     NOT NULL DEFAULT 0,      -- smaller runs first
  run_at       timestamptz NOT NULL DEFAULT now(),  -- not claimed before this, by the database clock
  attempt      integer     NOT NULL DEFAULT 0 CHECK (attempt >= 0),
  max_attempts integer     NOT NULL DEFAULT 25 CHECK (max_attempts >= 1),
  fence        bigint,                              -- the current claim's fencing token
  owner        text,                                -- the current claim's worker label, for humans
  expires_at   timestamptz,                         -- the current claim's lease, by the database clock
  last_error   text,
  created_at   timestamptz NOT NULL DEFAULT now(),
  finished_at  timestamptz,                         -- when it became completed or dead
  CONSTRAINT pgfence_jobs_check CHECK (state <> 'running' OR (fence IS NOT NULL AND expires_at IS NOT NULL))
);

-- Serves the claim: WHERE queue = $1 AND state = 'available' AND run_at <= now()
-- ORDER BY priority, run_at, id. Only runnable rows are in it, so it stays
-- small however many completed rows the table keeps.
CREATE INDEX pgfence_jobs_claim_idx ON pgfence_jobs (queue, priority, run_at, id)
  WHERE state = 'available';

-- Serves the rescue: WHERE state = 'running' AND expires_at <= now().
CREATE INDEX pgfence_jobs_rescue_idx ON pgfence_jobs (expires_at)
  WHERE state = 'running';

-- The SQL contract: leases for any language, with pglease's semantics.
--
--   pgfence_acquire(key, ttl, owner) -> (fence, expires_at), no row when held
--   pgfence_renew(key, fence, ttl)   -> (expires_at), no row when lost
--   pgfence_release(key, fence)      -> (released), no row when not held
--
-- Each runs the statement pglease runs (queries/leases.sql: Acquire, Renew,
-- Release), with the same conditions, by the same clock, committed the same
-- way; only the owner token is drawn here instead of by the client. Call
-- each on its own, in autocommit: now() is the start time of the
-- transaction, so a call in an older transaction would judge expiry by a
-- past time (pgfence_check_lease_call refuses that, SQLSTATE PF006).
--
-- pgfence_check_lease_call checks a call's arguments and raises SQLSTATE
-- PF005 for bad input, naming the function and the argument; its callers
-- put it first in their WHERE clause, where, having no column and no
-- volatile function in it, it is a one-time filter, evaluated before the
-- statement reads or writes anything (no fence is drawn for bad input).
-- fn names the caller, which decides the arguments it needs: a key always,
-- a TTL for acquire and renew, an owner for acquire, a fence for renew and
-- release. The bounds are pglease's: keys of 1 to 512 bytes, TTLs of 10 ms
-- to 24 h, owner labels of 1 to 256 bytes, positive fences. NUL bytes and
-- invalid UTF-8 never reach it: PostgreSQL refuses them in any text
-- (SQLSTATE 22021).
CREATE FUNCTION pgfence_check_lease_call(fn text, key text, ttl interval, owner text, fence bigint) RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
  IF statement_timestamp() - transaction_timestamp() > interval '1 second' THEN
    RAISE EXCEPTION '%: called in a transaction that began % before this statement', fn, statement_timestamp() - transaction_timestamp()
      USING ERRCODE = 'PF006',
            HINT = 'Call it on its own, in autocommit (psql: no BEGIN; psycopg: autocommit=True): expiry is judged by now(), the start time of the transaction, which is past.';
  END IF;
  IF key IS NULL OR key = '' THEN
    RAISE EXCEPTION '%: the key is empty', fn USING ERRCODE = 'PF005';
  END IF;
  IF octet_length(key) > 512 THEN
    RAISE EXCEPTION '%: the key is % bytes, at most 512', fn, octet_length(key) USING ERRCODE = 'PF005';
  END IF;
  IF fn IN ('pgfence_acquire', 'pgfence_renew') AND (ttl IS NULL OR ttl < interval '10 milliseconds' OR ttl > interval '24 hours') THEN
    RAISE EXCEPTION '%: the TTL % is outside [10 ms, 24 h]', fn, coalesce(ttl::text, 'NULL')
      USING ERRCODE = 'PF005',
            HINT = 'A TTL must outlive a round trip to the server and be short enough that a crashed holder does not block the key for long; renew a shorter lease instead of taking a long one.';
  END IF;
  IF fn = 'pgfence_acquire' AND (owner IS NULL OR owner = '' OR octet_length(owner) > 256) THEN
    RAISE EXCEPTION '%: the owner label must be 1 to 256 bytes, got %', fn, coalesce(octet_length(owner)::text || ' bytes', 'NULL')
      USING ERRCODE = 'PF005';
  END IF;
  IF fn IN ('pgfence_renew', 'pgfence_release') AND (fence IS NULL OR fence <= 0) THEN
    RAISE EXCEPTION '%: the fence must be positive, got %', fn, coalesce(fence::text, 'NULL')
      USING ERRCODE = 'PF005';
  END IF;
  RETURN true;
END
$$;

DO $do$
BEGIN
  -- Acquire: grants the lease when the key is free or its lease has expired
  -- by the database clock, and returns the new fence; no row when an
  -- unexpired lease exists. In the one statement: a durable commit whatever
  -- the session's synchronous_commit (a grant lost in a crash could hand its
  -- fence out twice); lock_timeout bounding the wait on a concurrent
  -- acquisition of the same key; and a conflicting row replaced only when it
  -- has expired and carries a lower fence than the one just drawn. The owner
  -- token is 244 random bits drawn here, so pglease's check that it has no
  -- tombstone always holds and is left out.
  EXECUTE format($sql$
CREATE FUNCTION pgfence_acquire(key text, ttl interval, owner text)
RETURNS TABLE (fence bigint, expires_at timestamptz)
LANGUAGE sql VOLATILE
AS $fn$
  INSERT INTO %1$I.lock_leases AS l (lock_key, owner, owner_token, fence, acquired_at, expires_at)
  SELECT $1, $3, replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''),
         %1$I.pgfence_draw_fence(), now(),
         now() + (extract(epoch FROM $2) * 1000000)::bigint * interval '1 microsecond'
   WHERE %1$I.pgfence_check_lease_call('pgfence_acquire', $1, $2, $3, NULL)
     AND %1$I.pgfence_commit_durably()
     AND set_config('lock_timeout', '1s', true) IS NOT NULL
  ON CONFLICT (lock_key) DO UPDATE
     SET owner       = EXCLUDED.owner,
         owner_token = EXCLUDED.owner_token,
         fence       = EXCLUDED.fence,
         acquired_at = EXCLUDED.acquired_at,
         expires_at  = EXCLUDED.expires_at
   WHERE l.expires_at <= now()
     AND l.fence < EXCLUDED.fence
  RETURNING l.fence, l.expires_at
$fn$
$sql$, current_schema());

  -- Renew: extends the lease only while it is unexpired and still carries
  -- this fence, so it never resurrects an expired lease; no row means the
  -- lease is lost. It commits durably: a renewal lost in a crash would leave
  -- the holder believing in an expiry the server forgot.
  EXECUTE format($sql$
CREATE FUNCTION pgfence_renew(key text, fence bigint, ttl interval)
RETURNS TABLE (expires_at timestamptz)
LANGUAGE sql VOLATILE
AS $fn$
  UPDATE %1$I.lock_leases
     SET expires_at = now() + (extract(epoch FROM $3) * 1000000)::bigint * interval '1 microsecond'
   WHERE %1$I.pgfence_check_lease_call('pgfence_renew', $1, $3, NULL, $2)
     AND lock_key = $1
     AND fence = $2
     AND expires_at > now()
     AND %1$I.pgfence_commit_durably()
  RETURNING expires_at
$fn$
$sql$, current_schema());

  -- Release: expires a held lease now, matched on key and fence, so a newer
  -- holder's lease is never touched; one row when it released the caller's
  -- grant, no row when it was not held any more. It commits asynchronously:
  -- set_config(..., true) inside a function lasts until the end of the
  -- calling transaction, which in autocommit is the call's own, so that
  -- commit does not wait for the disk. A release lost in a crash only makes
  -- the lease run to its TTL, and the next durable commit on the server (any
  -- acquisition) flushes it anyway.
  EXECUTE format($sql$
CREATE FUNCTION pgfence_release(key text, fence bigint)
RETURNS TABLE (released boolean)
LANGUAGE sql VOLATILE
AS $fn$
  UPDATE %1$I.lock_leases
     SET expires_at = now()
   WHERE %1$I.pgfence_check_lease_call('pgfence_release', $1, NULL, NULL, $2)
     AND lock_key = $1
     AND fence = $2
     AND expires_at > now()
     AND set_config('synchronous_commit', 'off', true) = 'off'
  RETURNING true
$fn$
$sql$, current_schema());
END
$do$;
