-- pgfence lease speed and durability: fence arithmetic the planner inlines,
-- fence draws that commit durably whatever the session says, and tombstones
-- for acquisitions whose caller gave up.
--
-- The fence keeps its meaning (migration 000001):
--
--     fence = timeline << 44 | nextval('pgfence_fence_seq')
--
-- written here as timeline * 2^44 + nextval(...), which is the same number
-- because the sequence stays below 2^44.

-- The timeline part of a fence. Its check is the overflow error: a timeline of
-- 2^19 or more would not fit in the 19 bits above the sequence. A domain check
-- costs one comparison inside the calling statement, where the former
-- PL/pgSQL function cost a call per fence.
CREATE DOMAIN pgfence_fence_timeline AS bigint
  CONSTRAINT pgfence_timeline_fits_in_a_fence CHECK (VALUE BETWEEN 0 AND 524287);

-- The fence arithmetic alone. A LANGUAGE sql function whose body is one
-- expression is inlined by the planner into the statement that calls it (as is
-- pgfence_timeline()), so a draw costs no function call of its own.
--
-- It does NOT make the draw durable. It is for statements that store the fence
-- in a row and force a durable commit themselves (pglease's acquire): such a
-- commit flushes the WAL up to its own commit record, which includes the
-- sequence's WAL. Everything else uses pgfence_next_fence().
CREATE FUNCTION pgfence_draw_fence() RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
  SELECT pgfence_timeline()::pgfence_fence_timeline * 17592186044416 + nextval('pgfence_fence_seq')
$$;

-- Makes the calling transaction commit durably: a session or database whose
-- synchronous_commit is off gets it raised to on for this transaction only;
-- any other setting (on, local, remote_write, remote_apply) already flushes
-- the local WAL at commit and is left as it is. Always true. Inlined like the
-- functions above.
CREATE FUNCTION pgfence_commit_durably() RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
  SELECT CASE current_setting('synchronous_commit')
           WHEN 'off' THEN set_config('synchronous_commit', 'on', true) = 'on'
           ELSE true
         END
$$;

-- The never-repeating fence source for every other use: NextFence, job claims,
-- an operator's fresh fence, your own SQL. Whatever the session's
-- synchronous_commit, the fence it returns survives a crash:
--
--   * pgfence_commit_durably() makes the transaction's commit flush the WAL;
--   * but nextval() writes WAL only once per 32 values, and a transaction
--     that writes no WAL has nothing to flush: a plain SELECT
--     pgfence_next_fence() commits without touching the disk. Its value is
--     covered by the WAL record of the draw that logged the batch, and that
--     record is unflushed if that draw's transaction rolled back (rollbacks
--     never wait for the disk). A crash then restarts the sequence below
--     values already handed out. So a transaction that has no transaction id
--     yet (has written nothing) writes one small transactional WAL record of
--     its own, a logical decoding message with the prefix 'pgfence', so that
--     its commit flushes the WAL up to and past the sequence's record.
--     Logical decoding consumers see these messages only if they ask for
--     messages; they carry no content.
--
-- A statement that writes rows and calls this once per row (a claim of many
-- jobs) writes that record once: the first row's write assigns the
-- transaction id.
CREATE OR REPLACE FUNCTION pgfence_next_fence() RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
  SELECT CASE
           WHEN pgfence_commit_durably()
            AND (pg_current_xact_id_if_assigned() IS NOT NULL
                 OR pg_logical_emit_message(true, 'pgfence', '') IS NOT NULL)
           THEN pgfence_draw_fence()
         END
$$;

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

-- Every acquire, renew and release rewrites expires_at. With an index on that
-- column no such update can be a HOT update (one that adds no index entries
-- when the row's new version fits on its page): each one wrote a new entry
-- into both indexes. Without it, acquire and release touch only the heap
-- (measured: nearly every update becomes HOT). The sweep of long-expired rows
-- reads the table instead, which is what it did anyway when most rows match.
DROP INDEX IF EXISTS lock_leases_expires_at_idx;
