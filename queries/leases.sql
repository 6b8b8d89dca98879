-- name: Acquire :one
-- Grants the lease when the key is free or its lease has expired by the
-- database clock, and returns the new fence; no row when an unexpired lease
-- exists. The settings make this commit durable whatever the session's
-- synchronous_commit (a grant lost in a crash could hand its fence out
-- twice), and bound the wait on a concurrent acquisition of the same key, so
-- that an ambiguous outcome is settled within a known time (pglease's
-- acquireLockTimeout). A fence is drawn on every call, granted or not; gaps
-- are harmless.
INSERT INTO lock_leases AS l (lock_key, owner, owner_token, fence, acquired_at, expires_at)
SELECT sqlc.arg(lock_key)::text, sqlc.arg(owner)::text, sqlc.arg(owner_token)::text,
       pgfence_next_fence(), now(),
       now() + sqlc.arg(ttl_micros)::bigint * interval '1 microsecond'
  FROM (SELECT set_config('synchronous_commit', 'on', true),
               set_config('lock_timeout', '1s', true)) AS settings
ON CONFLICT (lock_key) DO UPDATE
   SET owner       = EXCLUDED.owner,
       owner_token = EXCLUDED.owner_token,
       fence       = EXCLUDED.fence,
       acquired_at = EXCLUDED.acquired_at,
       expires_at  = EXCLUDED.expires_at
 WHERE l.expires_at <= now()
RETURNING l.fence, l.expires_at;

-- name: Renew :one
-- Extends the lease only while it is unexpired and still carries this fence:
-- it can never resurrect an expired lease. No row means the lease is lost.
UPDATE lock_leases
   SET expires_at = now() + sqlc.arg(ttl_micros)::bigint * interval '1 microsecond'
 WHERE lock_key = sqlc.arg(lock_key)
   AND fence = sqlc.arg(fence)
   AND expires_at > now()
RETURNING expires_at;

-- name: Release :one
-- Expires the lease now but keeps the row. Matched on key and fence, so a
-- newer holder's lease is never touched. was_held tells whether the lease was
-- still valid when released; no row means another holder took the key.
-- With notify, a released row also sends NOTIFY pgfence_lease_released with
-- the key as payload, for waiters that listen (pglease's WithWakeOnRelease).
-- PostgreSQL delivers it only when this statement's transaction commits, so
-- no waiter wakes before the lease is free. It is opt-in because it is not
-- free: notifying transactions commit one at a time (PostgreSQL serialises
-- them on a global lock), which halved release throughput at 8+ concurrent
-- clients with fsync on.
WITH released AS (
  UPDATE lock_leases AS l
     SET expires_at = LEAST(l.expires_at, now())
    FROM lock_leases AS prev
   WHERE l.lock_key = sqlc.arg(lock_key)
     AND l.fence = sqlc.arg(fence)
     AND prev.lock_key = l.lock_key
  RETURNING l.lock_key, (prev.expires_at > now())::boolean AS was_held
)
SELECT r.was_held
  FROM released AS r,
       LATERAL (SELECT CASE WHEN sqlc.arg(notify)::boolean
                            THEN pg_notify('pgfence_lease_released', r.lock_key) END) AS notified;

-- name: FindByOwnerToken :one
-- Resolves an ambiguous acquisition: the unexpired lease granted to this
-- owner token, if the acquisition did take effect.
SELECT fence, expires_at
  FROM lock_leases
 WHERE lock_key = sqlc.arg(lock_key)
   AND owner_token = sqlc.arg(owner_token)
   AND expires_at > now();

-- name: ReleaseByOwnerToken :one
-- Gives back a lease whose acquisition was ambiguous and whose caller gave up.
-- Like Release, with notify it sends NOTIFY pgfence_lease_released with the
-- key, at commit.
WITH released AS (
  UPDATE lock_leases
     SET expires_at = LEAST(expires_at, now())
   WHERE lock_key = sqlc.arg(lock_key)
     AND owner_token = sqlc.arg(owner_token)
     AND expires_at > now()
  RETURNING lock_key, fence
)
SELECT r.fence
  FROM released AS r,
       LATERAL (SELECT CASE WHEN sqlc.arg(notify)::boolean
                            THEN pg_notify('pgfence_lease_released', r.lock_key) END) AS notified;

-- name: GetLease :one
-- One lease as the database clock sees it now.
SELECT lock_key, owner, fence, acquired_at, expires_at,
       (expires_at > now())::boolean AS held,
       (extract(epoch FROM GREATEST(expires_at - now(), interval '0')) * 1000000)::bigint AS remaining_micros,
       now()::timestamptz AS db_now
  FROM lock_leases
 WHERE lock_key = sqlc.arg(lock_key);

-- name: ListLeases :many
-- Every lease row, held or expired, by key.
SELECT lock_key, owner, fence, acquired_at, expires_at,
       (expires_at > now())::boolean AS held,
       (extract(epoch FROM GREATEST(expires_at - now(), interval '0')) * 1000000)::bigint AS remaining_micros,
       now()::timestamptz AS db_now
  FROM lock_leases
 ORDER BY lock_key;

-- name: SweepExpired :execrows
-- Deletes rows expired longer than the grace period. Safe at any time: fences
-- come from pgfence_next_fence(), not from the row, so deleting a row never
-- lets a fence repeat.
DELETE FROM lock_leases
 WHERE expires_at < now() - sqlc.arg(grace_micros)::bigint * interval '1 microsecond';

-- name: NextFence :one
-- Draws a fence from the never-repeating source without taking a lease, for
-- token sources of your own (job rows, epochs).
SELECT pgfence_next_fence()::bigint AS fence;
