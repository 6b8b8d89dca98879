-- name: Acquire :one
-- Grants the lease when the key is free or its lease has expired by the
-- database clock, and returns the new fence; no row when an unexpired lease
-- exists, or when this owner token was abandoned (see Abandon).
--
-- Its conditions, cheapest first, all inside the one statement:
--   * pgfence_commit_durably() makes this transaction commit durably
--     whatever the session's synchronous_commit (a grant lost in a crash
--     could hand its fence out twice);
--   * lock_timeout bounds the wait on a concurrent acquisition of the same
--     key, so that an ambiguous outcome is settled within a known time
--     (pglease's acquireLockTimeout);
--   * the owner token must have no tombstone: one index probe in a table
--     that is almost always empty;
--   * the conflicting row must have expired, and carry a lower fence than
--     the one just drawn: an acquisition that drew its fence early and then
--     waited for the row can never write a fence below the row's.
-- pgfence_draw_fence() is inlined into this statement, no function call. A
-- fence is drawn on every call, granted or not; gaps are harmless. The key is
-- not checked here (the table has no CHECK constraints, which PostgreSQL
-- would re-plan in every statement): pglease refuses keys outside 1-512 bytes before they are sent.
INSERT INTO /* TEMPLATE: schema */lock_leases AS l (lock_key, owner, owner_token, fence, acquired_at, expires_at)
SELECT sqlc.arg(lock_key)::text, sqlc.arg(owner)::text, sqlc.arg(owner_token)::text,
       /* TEMPLATE: schema */pgfence_draw_fence(), now(),
       now() + sqlc.arg(ttl_micros)::bigint * interval '1 microsecond'
 WHERE /* TEMPLATE: schema */pgfence_commit_durably()
   AND set_config('lock_timeout', '1s', true) IS NOT NULL
   AND NOT EXISTS (SELECT FROM /* TEMPLATE: schema */pgfence_abandoned_tokens AS a WHERE a.owner_token = sqlc.arg(owner_token)::text)
ON CONFLICT (lock_key) DO UPDATE
   SET owner       = EXCLUDED.owner,
       owner_token = EXCLUDED.owner_token,
       fence       = EXCLUDED.fence,
       acquired_at = EXCLUDED.acquired_at,
       expires_at  = EXCLUDED.expires_at
 WHERE l.expires_at <= now()
   AND l.fence < EXCLUDED.fence
RETURNING l.fence, l.expires_at;

-- name: AcquireBatch :many
-- Acquire for several keys at once, in one statement and one durable commit
-- (pglease's group acquire: concurrent TryAcquire calls on one client that
-- arrive while a statement is in flight go out together). Each row is judged
-- exactly as Acquire judges its one key; it returns one row per key granted,
-- with the owner token to tell the callers apart. Keys must be distinct (an
-- upsert cannot touch one row twice). Rows are inserted in key order, so two
-- batches wait for each other's row locks in one order and never deadlock;
-- lock_timeout bounds each wait, so the statement lasts at most one bound per
-- key.
INSERT INTO /* TEMPLATE: schema */lock_leases AS l (lock_key, owner, owner_token, fence, acquired_at, expires_at)
SELECT r.lock_key, sqlc.arg(owner)::text, r.owner_token,
       /* TEMPLATE: schema */pgfence_draw_fence(), now(),
       now() + r.ttl_micros * interval '1 microsecond'
  FROM ROWS FROM (unnest(sqlc.arg(lock_keys)::text[]), unnest(sqlc.arg(owner_tokens)::text[]),
                 unnest(sqlc.arg(ttls_micros)::bigint[])) AS r(lock_key, owner_token, ttl_micros)
 WHERE /* TEMPLATE: schema */pgfence_commit_durably()
   AND set_config('lock_timeout', '1s', true) IS NOT NULL
   AND NOT EXISTS (SELECT FROM /* TEMPLATE: schema */pgfence_abandoned_tokens AS a WHERE a.owner_token = r.owner_token)
 ORDER BY r.lock_key
ON CONFLICT (lock_key) DO UPDATE
   SET owner       = EXCLUDED.owner,
       owner_token = EXCLUDED.owner_token,
       fence       = EXCLUDED.fence,
       acquired_at = EXCLUDED.acquired_at,
       expires_at  = EXCLUDED.expires_at
 WHERE l.expires_at <= now()
   AND l.fence < EXCLUDED.fence
RETURNING l.owner_token, l.fence, l.expires_at;

-- name: Renew :one
-- Extends the lease only while it is unexpired and still carries this fence:
-- it can never resurrect an expired lease. No row means the lease is lost.
-- It commits durably whatever the session says: a renewal lost in a crash
-- would leave the holder believing in an expiry the server forgot.
UPDATE /* TEMPLATE: schema */lock_leases
   SET expires_at = now() + sqlc.arg(ttl_micros)::bigint * interval '1 microsecond'
 WHERE lock_key = sqlc.arg(lock_key)
   AND fence = sqlc.arg(fence)
   AND expires_at > now()
   AND /* TEMPLATE: schema */pgfence_commit_durably()
RETURNING expires_at;

-- name: Release :one
-- Expires a held lease now but keeps the row, matched on key and fence, so a
-- newer holder's lease is never touched. One row (true) means it was still
-- held and is released; no row means it was not held any more (expired, or
-- another owner took the key: LeaseFence tells which), and nothing was
-- written.
--
-- Unless durable, it commits asynchronously (synchronous_commit = off for
-- this transaction only): a release lost in a crash only makes the lease run
-- to its TTL, which is always safe, and the next durable commit on the
-- server (any acquisition) flushes it anyway. That saves one WAL flush per
-- acquire + release.
UPDATE /* TEMPLATE: schema */lock_leases
   SET expires_at = now(), released_at = now()
 WHERE lock_key = sqlc.arg(lock_key)
   AND fence = sqlc.arg(fence)
   AND expires_at > now()
   AND CASE WHEN sqlc.arg(durable)::boolean THEN /* TEMPLATE: schema */pgfence_commit_durably()
            ELSE set_config('synchronous_commit', 'off', true) = 'off' END
RETURNING true AS released;

-- name: ReleaseNotify :one
-- Release that also sends NOTIFY pgfence_lease_released with the key as
-- payload, for waiters that listen (pglease's WithWakeOnRelease).
-- PostgreSQL delivers it only when this statement's transaction commits, so
-- no waiter wakes before the lease is free. It is opt-in because it is not
-- free: notifying transactions commit one at a time (PostgreSQL serialises
-- them on a global lock), which halved release throughput at 8+ concurrent
-- clients with fsync on.
UPDATE /* TEMPLATE: schema */lock_leases
   SET expires_at = now(), released_at = now()
 WHERE lock_key = sqlc.arg(lock_key)
   AND fence = sqlc.arg(fence)
   AND expires_at > now()
   AND CASE WHEN sqlc.arg(durable)::boolean THEN /* TEMPLATE: schema */pgfence_commit_durably()
            ELSE set_config('synchronous_commit', 'off', true) = 'off' END
RETURNING (pg_notify('pgfence_lease_released', lock_key) IS NOT NULL)::boolean AS released;

-- name: LeaseFence :one
-- The fence the key's row carries now, held or not: after a Release that
-- found nothing to release, it tells "had expired" (still this fence) from
-- "another owner took the key" (another fence, or no row).
SELECT fence FROM /* TEMPLATE: schema */lock_leases WHERE lock_key = sqlc.arg(lock_key);

-- name: FindByOwnerToken :one
-- Resolves an ambiguous acquisition: the unexpired lease granted to this
-- owner token, if the acquisition did take effect.
SELECT fence, expires_at
  FROM /* TEMPLATE: schema */lock_leases
 WHERE lock_key = sqlc.arg(lock_key)
   AND owner_token = sqlc.arg(owner_token)
   AND expires_at > now();

-- name: Abandon :one
-- Gives up an acquisition whose outcome was ambiguous: records a tombstone
-- for its owner token, so that Acquire never grants under it however late the
-- request reaches the server, and releases a grant that already landed. It
-- returns the released lease's fence; no row when nothing was held under the
-- token. The update is matched on the key alone, so that it waits for an
-- acquisition of the key still in progress and then judges the newest row
-- version; a row held by another token is written back unchanged. With
-- notify, a release also sends NOTIFY pgfence_lease_released with the key.
--
-- One race is left to the caller: an acquisition that reached the server
-- before the tombstone committed and that has not yet touched the row when
-- this runs. Its statement is bounded by lock_timeout, so pglease runs Abandon
-- once more after that bound (see recheckLater).
WITH tombstone AS (
  INSERT INTO /* TEMPLATE: schema */pgfence_abandoned_tokens (owner_token)
  VALUES (sqlc.arg(owner_token)::text)
  ON CONFLICT (owner_token) DO NOTHING
), released AS (
  UPDATE /* TEMPLATE: schema */lock_leases AS l
     SET expires_at = CASE WHEN l.owner_token = sqlc.arg(owner_token)::text
                           THEN LEAST(l.expires_at, now())
                           ELSE l.expires_at END,
         released_at = CASE WHEN l.owner_token = sqlc.arg(owner_token)::text AND l.expires_at > now()
                              THEN now()
                              ELSE l.released_at END
   WHERE l.lock_key = sqlc.arg(lock_key)
  RETURNING l.lock_key, l.fence, (l.owner_token = sqlc.arg(owner_token)::text AND l.expires_at = now()) AS ours
)
SELECT r.fence
  FROM released AS r,
       LATERAL (SELECT CASE WHEN sqlc.arg(notify)::boolean
                            THEN pg_notify('pgfence_lease_released', r.lock_key) END) AS notified
 WHERE r.ours;

-- name: GetLease :one
-- One lease as the database clock sees it now; released_at is set when its
-- holder released it, NULL when it is held or ran out.
SELECT lock_key, owner, fence, acquired_at, expires_at, released_at,
       (expires_at > now())::boolean AS held,
       (extract(epoch FROM GREATEST(expires_at - now(), interval '0')) * 1000000)::bigint AS remaining_micros,
       now()::timestamptz AS db_now
  FROM /* TEMPLATE: schema */lock_leases
 WHERE lock_key = sqlc.arg(lock_key);

-- name: ListLeases :many
-- Every lease row, held, released or expired, by key.
SELECT lock_key, owner, fence, acquired_at, expires_at, released_at,
       (expires_at > now())::boolean AS held,
       (extract(epoch FROM GREATEST(expires_at - now(), interval '0')) * 1000000)::bigint AS remaining_micros,
       now()::timestamptz AS db_now
  FROM /* TEMPLATE: schema */lock_leases
 ORDER BY lock_key;

-- name: SweepExpired :execrows
-- Deletes rows expired longer than the grace period. Safe at any time: fences
-- come from pgfence_next_fence(), not from the row, so deleting a row never
-- lets a fence repeat. One transaction for every row: on a big table prefer
-- SweepExpiredBatch (what pglease uses).
DELETE FROM /* TEMPLATE: schema */lock_leases
 WHERE expires_at < now() - sqlc.arg(grace_micros)::bigint * interval '1 microsecond';

-- name: SweepAbandonedTokens :execrows
-- Deletes tombstones of abandoned acquisitions older than the retention
-- (pglease.AbandonedTokenRetention).
DELETE FROM /* TEMPLATE: schema */pgfence_abandoned_tokens
 WHERE abandoned_at < now() - sqlc.arg(retention_micros)::bigint * interval '1 microsecond';

-- name: SweepExpiredBatch :one
-- One batch of pglease's SweepExpired, in its own short transaction: it
-- reads the next batch_size rows in key order after after_key (a cursor on
-- the primary key, so no index on expires_at is needed; the schema has none,
-- which keeps acquire's updates HOT) and deletes those expired longer
-- than the grace period. The DELETE re-checks the expiry on the newest row
-- version (READ COMMITTED re-evaluates its WHERE on a row updated since the
-- snapshot), so a row acquired or renewed meanwhile is never deleted.
-- Deleting is safe at any time: fences come from a sequence, not from the
-- row. It returns how many rows it read (fewer than batch_size: the walk is
-- done), the last key read (the next cursor) and how many it deleted.
--
-- It commits asynchronously (synchronous_commit = off for this transaction
-- only): a delete lost in a crash leaves an expired row that the next sweep
-- deletes, and an acquisition that reuses the key commits durably, which
-- flushes the WAL up to and past this delete first.
WITH batch AS (
  SELECT lock_key, expires_at
    FROM /* TEMPLATE: schema */lock_leases
   WHERE lock_key > sqlc.arg(after_key)::text
   ORDER BY lock_key
   LIMIT sqlc.arg(batch_size)::int
), deleted AS (
  DELETE FROM /* TEMPLATE: schema */lock_leases
   WHERE lock_key = ANY (ARRAY(SELECT b.lock_key FROM batch AS b
                                WHERE b.expires_at < now() - sqlc.arg(grace_micros)::bigint * interval '1 microsecond'))
     AND expires_at < now() - sqlc.arg(grace_micros)::bigint * interval '1 microsecond'
  RETURNING 1
)
SELECT (SELECT count(*) FROM batch)::bigint AS scanned,
       COALESCE((SELECT max(lock_key) FROM batch), '')::text AS last_key,
       (SELECT count(*) FROM deleted)::bigint AS deleted
 WHERE set_config('synchronous_commit', 'off', true) = 'off';

-- name: SweepAbandonedTokensBatch :one
-- One batch of the sweep of tombstones older than the retention
-- (pglease.AbandonedTokenRetention), walked by owner_token like
-- SweepExpiredBatch and committed asynchronously for the same reason: a
-- tombstone that outlives a crash only waits for the next sweep.
WITH batch AS (
  SELECT owner_token, abandoned_at
    FROM /* TEMPLATE: schema */pgfence_abandoned_tokens
   WHERE owner_token > sqlc.arg(after_token)::text
   ORDER BY owner_token
   LIMIT sqlc.arg(batch_size)::int
), deleted AS (
  DELETE FROM /* TEMPLATE: schema */pgfence_abandoned_tokens
   WHERE owner_token = ANY (ARRAY(SELECT b.owner_token FROM batch AS b
                                   WHERE b.abandoned_at < now() - sqlc.arg(retention_micros)::bigint * interval '1 microsecond'))
     AND abandoned_at < now() - sqlc.arg(retention_micros)::bigint * interval '1 microsecond'
  RETURNING 1
)
SELECT (SELECT count(*) FROM batch)::bigint AS scanned,
       COALESCE((SELECT max(owner_token) FROM batch), '')::text AS last_token,
       (SELECT count(*) FROM deleted)::bigint AS deleted
 WHERE set_config('synchronous_commit', 'off', true) = 'off';

-- name: NextFence :one
-- Draws a fence from the never-repeating source without taking a lease, for
-- token sources of your own (job rows, epochs). It commits durably whatever
-- the session's synchronous_commit (see pgfence_next_fence() in migration
-- 000005), so a fence it returned is never drawn again after a crash.
SELECT /* TEMPLATE: schema */pgfence_next_fence()::bigint AS fence;
