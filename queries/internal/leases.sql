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
ON CONFLICT (lock_key, slot) DO UPDATE
   SET kind        = 'exclusive',
       permits     = 0,
       owner       = EXCLUDED.owner,
       owner_token = EXCLUDED.owner_token,
       fence       = EXCLUDED.fence,
       acquired_at = EXCLUDED.acquired_at,
       expires_at  = EXCLUDED.expires_at
 WHERE l.expires_at <= now()
   AND l.fence < EXCLUDED.fence
RETURNING l.owner_token, l.fence, l.expires_at;

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
   AND slot = 0
   AND kind = 'exclusive'
   AND fence = sqlc.arg(fence)
   AND expires_at > now()
   AND CASE WHEN sqlc.arg(durable)::boolean THEN /* TEMPLATE: schema */pgfence_commit_durably()
            ELSE set_config('synchronous_commit', 'off', true) = 'off' END
RETURNING (pg_notify('pgfence_lease_released', lock_key) IS NOT NULL)::boolean AS released;

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
   WHERE l.lock_key = sqlc.arg(lock_key) AND l.slot = 0
  RETURNING l.lock_key, l.fence, (l.owner_token = sqlc.arg(owner_token)::text AND l.expires_at = now()) AS ours
)
SELECT r.fence
  FROM released AS r,
       LATERAL (SELECT CASE WHEN sqlc.arg(notify)::boolean
                            THEN pg_notify('pgfence_lease_released', r.lock_key) END) AS notified
 WHERE r.ours;

-- name: SweepExpiredBatch :one
-- One batch of pglease's SweepExpired, in its own short transaction: it
-- reads the next batch_size rows in (lock_key, slot) order after (after_key,
-- after_slot) (a cursor on the primary key, so no index on expires_at is
-- needed; the schema has none, which keeps acquire's updates HOT) and deletes
-- those expired longer than the grace period: keys' rows, shared holders and
-- permits alike. The DELETE re-checks the expiry on the newest row version
-- (READ COMMITTED re-evaluates its WHERE on a row updated since the
-- snapshot), so a row acquired or renewed meanwhile is never deleted. A
-- key's row expires no earlier than its holders', so an expired one has none
-- left. Deleting is safe at any time: fences come from a sequence, not from
-- the row. It returns how many rows it read (fewer than batch_size: the walk
-- is done), the last row read (the next cursor) and how many it deleted.
--
-- It commits asynchronously (synchronous_commit = off for this transaction
-- only): a delete lost in a crash leaves an expired row that the next sweep
-- deletes, and an acquisition that reuses the key commits durably, which
-- flushes the WAL up to and past this delete first.
WITH batch AS (
  SELECT lock_key, slot, expires_at
    FROM /* TEMPLATE: schema */lock_leases
   WHERE (lock_key, slot) > (sqlc.arg(after_key)::text, sqlc.arg(after_slot)::integer)
   ORDER BY lock_key, slot
   LIMIT sqlc.arg(batch_size)::int
), deleted AS (
  DELETE FROM /* TEMPLATE: schema */lock_leases AS l
   WHERE (l.lock_key, l.slot) IN (SELECT b.lock_key, b.slot FROM batch AS b
                                   WHERE b.expires_at < now() - sqlc.arg(grace_micros)::bigint * interval '1 microsecond')
     AND l.expires_at < now() - sqlc.arg(grace_micros)::bigint * interval '1 microsecond'
  RETURNING 1
), last AS (
  SELECT b.lock_key, b.slot FROM batch AS b ORDER BY b.lock_key DESC, b.slot DESC LIMIT 1
)
SELECT (SELECT count(*) FROM batch)::bigint AS scanned,
       COALESCE((SELECT l.lock_key FROM last AS l), '')::text AS last_key,
       COALESCE((SELECT l.slot FROM last AS l), -1)::integer AS last_slot,
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

-- name: SweepPlacesBatch :one
-- Deletes up to batch_size places of waiters expired longer than the grace
-- period: a waiter that died leaves its place behind until a grant of its
-- key deletes it, and a key never granted again would keep it. Places are
-- few (one per live waiter), so each batch finds its rows by scanning; it
-- reports how many it deleted (batch_size: run it again). An expired place
-- is dead, so deleting one never changes an order; each delete re-checks the
-- expiry on the newest row version, so a place refreshed meanwhile stays.
-- It commits asynchronously: a place that outlives a crash waits for the
-- next sweep.
WITH cutoff AS (
  SELECT now() - sqlc.arg(grace_micros)::bigint * interval '1 microsecond' AS at
), places AS (
  DELETE FROM /* TEMPLATE: schema */pgfence_waiters AS w
   WHERE w.ctid = ANY (ARRAY(SELECT x.ctid FROM /* TEMPLATE: schema */pgfence_waiters AS x
                              WHERE x.expires_at < (SELECT c.at FROM cutoff AS c) LIMIT sqlc.arg(batch_size)::int))
     AND w.expires_at < (SELECT c.at FROM cutoff AS c)
  RETURNING 1
)
SELECT (SELECT count(*) FROM places)::bigint AS most_deleted
 WHERE set_config('synchronous_commit', 'off', true) = 'off';
