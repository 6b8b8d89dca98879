-- name: AcquirePermit :one
-- Grants the lowest free permit slot (0..permits-1) of a semaphore, with a
-- new fence; no row when all permits are held or the owner token was
-- abandoned. SQLSTATE PF007 when the key's holders agreed on another number
-- of permits (see pgfence_acquire_permit in migration 000009).
SELECT r.slot::integer AS slot, r.fence::bigint AS fence, r.expires_at::timestamptz AS expires_at
  FROM /* TEMPLATE: schema */pgfence_acquire_permit(sqlc.arg(lock_key)::text, sqlc.arg(permits)::integer,
       sqlc.arg(owner)::text, sqlc.arg(owner_token)::text, sqlc.arg(ttl_micros)::bigint) AS r;

-- name: AcquireShared :one
-- Grants a shared or the exclusive lease of a shared/exclusive key; no row
-- when refused. A refused exclusive request with wait_micros > 0 holds a
-- waiter's place for that long, which keeps new shared leases out.
SELECT r.slot::integer AS slot, r.fence::bigint AS fence, r.expires_at::timestamptz AS expires_at
  FROM /* TEMPLATE: schema */pgfence_acquire_shared(sqlc.arg(lock_key)::text, sqlc.arg(exclusive)::boolean,
       sqlc.arg(owner)::text, sqlc.arg(owner_token)::text, sqlc.arg(ttl_micros)::bigint,
       sqlc.arg(wait_micros)::bigint) AS r;

-- name: LeaveExclusiveQueue :one
-- An exclusive waiter that gives up gives its place back.
SELECT /* TEMPLATE: schema */pgfence_leave_exclusive_queue(sqlc.arg(lock_key)::text, sqlc.arg(owner_token)::text)::boolean AS left_queue;

-- name: RenewPermit :one
-- Extends a permit (or shared/exclusive lease) only while it is unexpired
-- and carries this fence: never resurrects one. It commits durably.
UPDATE /* TEMPLATE: schema */pgfence_permits
   SET expires_at = now() + sqlc.arg(ttl_micros)::bigint * interval '1 microsecond'
 WHERE lock_key = sqlc.arg(lock_key)
   AND slot = sqlc.arg(slot)
   AND fence = sqlc.arg(fence)
   AND expires_at > now()
   AND /* TEMPLATE: schema */pgfence_commit_durably()
RETURNING expires_at;

-- name: ReleasePermit :one
-- Gives a permit (or shared/exclusive lease) back, matched on key, slot and
-- fence, so that a newer holder's is never touched. With a minimum hold, it
-- stays held until its grant time plus hold_micros by the database clock,
-- if that is later than now. Asynchronous commit unless durable, as the
-- mutex's Release.
UPDATE /* TEMPLATE: schema */pgfence_permits
   SET expires_at = GREATEST(now(), acquired_at + sqlc.arg(hold_micros)::bigint * interval '1 microsecond')
 WHERE lock_key = sqlc.arg(lock_key)
   AND slot = sqlc.arg(slot)
   AND fence = sqlc.arg(fence)
   AND expires_at > now()
   AND CASE WHEN sqlc.arg(durable)::boolean THEN /* TEMPLATE: schema */pgfence_commit_durably()
            ELSE set_config('synchronous_commit', 'off', true) = 'off' END
RETURNING true AS released;

-- name: PermitFence :one
-- The fence a permit slot's row carries now, held or not (after a release
-- that found nothing: expired, or taken by another holder).
SELECT fence FROM /* TEMPLATE: schema */pgfence_permits WHERE lock_key = sqlc.arg(lock_key) AND slot = sqlc.arg(slot);

-- name: FindPermitByOwnerToken :one
-- Resolves an ambiguous permit or shared/exclusive acquisition.
SELECT slot, fence, expires_at
  FROM /* TEMPLATE: schema */pgfence_permits
 WHERE lock_key = sqlc.arg(lock_key)
   AND owner_token = sqlc.arg(owner_token)
   AND expires_at > now();

-- name: AbandonPermit :many
-- Gives up an ambiguous permit or shared/exclusive acquisition: tombstones
-- the token and releases what it holds (pgfence_abandon_permit).
SELECT r::bigint AS fence FROM /* TEMPLATE: schema */pgfence_abandon_permit(sqlc.arg(lock_key)::text, sqlc.arg(owner_token)::text) AS r;

-- name: AcquireKeySet :many
-- Takes the mutex leases of several keys, all or none, each with its own
-- fence; SQLSTATE PF008 (and nothing granted) when any is held.
SELECT r.lock_key::text AS lock_key, r.fence::bigint AS fence, r.expires_at::timestamptz AS expires_at
  FROM /* TEMPLATE: schema */pgfence_acquire_set(sqlc.arg(lock_keys)::text[], sqlc.arg(owner)::text,
       sqlc.arg(owner_token)::text, sqlc.arg(ttl_micros)::bigint) AS r;

-- name: ReleaseHeldAtLeast :one
-- Release of a mutex lease with a minimum hold: the lease stays held until
-- its grant time plus hold_micros by the database clock, if that is later
-- than now; otherwise it is Release. Matched on key and fence.
UPDATE /* TEMPLATE: schema */lock_leases
   SET expires_at = GREATEST(now(), acquired_at + sqlc.arg(hold_micros)::bigint * interval '1 microsecond'),
       released_at = now()
 WHERE lock_key = sqlc.arg(lock_key)
   AND fence = sqlc.arg(fence)
   AND expires_at > now()
   AND CASE WHEN sqlc.arg(durable)::boolean THEN /* TEMPLATE: schema */pgfence_commit_durably()
            ELSE set_config('synchronous_commit', 'off', true) = 'off' END
RETURNING true AS released;

-- name: ListPermits :many
-- Every unexpired permit and shared/exclusive lease, by key and slot, with
-- the number of permits its key's holders agreed on (0: shared/exclusive).
SELECT p.lock_key, s.permits, p.slot, p.exclusive, p.owner, p.fence, p.acquired_at, p.expires_at,
       (extract(epoch FROM GREATEST(p.expires_at - now(), interval '0')) * 1000000)::bigint AS remaining_micros
  FROM /* TEMPLATE: schema */pgfence_permits AS p
  JOIN /* TEMPLATE: schema */pgfence_semaphores AS s USING (lock_key)
 WHERE p.expires_at > now()
 ORDER BY p.lock_key, p.slot;

-- name: ListExclusiveWaiters :many
-- Exclusive waiters whose place has not expired, by key.
SELECT lock_key, count(*)::bigint AS waiting
  FROM /* TEMPLATE: schema */pgfence_exclusive_waiters
 WHERE expires_at > now()
 GROUP BY lock_key
 ORDER BY lock_key;

-- name: WatchPermits :many
-- Per semaphore or shared/exclusive key with a holder or a waiter now (by
-- the database clock), at most row_limit keys in key order: its number of
-- permits (0: shared/exclusive), the unexpired permits or shared leases, the
-- exclusive lease (0 or 1) and the exclusive waiters.
SELECT s.lock_key, s.permits,
       (SELECT count(*) FROM /* TEMPLATE: schema */pgfence_permits AS p
         WHERE p.lock_key = s.lock_key AND p.expires_at > now() AND NOT p.exclusive)::bigint AS in_use,
       (SELECT count(*) FROM /* TEMPLATE: schema */pgfence_permits AS p
         WHERE p.lock_key = s.lock_key AND p.expires_at > now() AND p.exclusive)::bigint AS exclusive_held,
       (SELECT count(*) FROM /* TEMPLATE: schema */pgfence_exclusive_waiters AS w
         WHERE w.lock_key = s.lock_key AND w.expires_at > now())::bigint AS waiters
  FROM /* TEMPLATE: schema */pgfence_semaphores AS s
 WHERE EXISTS (SELECT FROM /* TEMPLATE: schema */pgfence_permits AS p WHERE p.lock_key = s.lock_key AND p.expires_at > now())
    OR EXISTS (SELECT FROM /* TEMPLATE: schema */pgfence_exclusive_waiters AS w WHERE w.lock_key = s.lock_key AND w.expires_at > now())
 ORDER BY s.lock_key
 LIMIT sqlc.arg(row_limit);

-- name: AcquireFIFO :one
-- One attempt of a fair waiter (pgfence_acquire_fifo): the fence when
-- granted, else fence 0 and the number of waiters ahead (-1: the owner
-- token was abandoned).
SELECT coalesce(r.fence, 0)::bigint AS fence, coalesce(r.expires_at, now())::timestamptz AS expires_at,
       coalesce(r.ahead, -1)::integer AS ahead
  FROM /* TEMPLATE: schema */pgfence_acquire_fifo(sqlc.arg(lock_key)::text, sqlc.arg(owner)::text,
       sqlc.arg(owner_token)::text, sqlc.arg(ttl_micros)::bigint, sqlc.arg(place_micros)::bigint) AS r;

-- name: LeaveQueue :exec
-- A fair waiter that gives up (or was granted another way) leaves the queue.
DELETE FROM /* TEMPLATE: schema */pgfence_waiters WHERE lock_key = sqlc.arg(lock_key) AND owner_token = sqlc.arg(owner_token);

-- name: ReleaseWakeNext :one
-- Release of a mutex lease (with an optional minimum hold, as
-- ReleaseHeldAtLeast) that wakes only the first fair waiter of the key: it
-- sends NOTIFY pgfence_lease_released with that waiter's owner token as the
-- payload, delivered when the release commits. No waiter: no notification.
UPDATE /* TEMPLATE: schema */lock_leases AS l
   SET expires_at = GREATEST(now(), l.acquired_at + sqlc.arg(hold_micros)::bigint * interval '1 microsecond'),
       released_at = now()
 WHERE l.lock_key = sqlc.arg(lock_key)
   AND l.fence = sqlc.arg(fence)
   AND l.expires_at > now()
   AND CASE WHEN sqlc.arg(durable)::boolean THEN /* TEMPLATE: schema */pgfence_commit_durably()
            ELSE set_config('synchronous_commit', 'off', true) = 'off' END
RETURNING (SELECT count(pg_notify('pgfence_lease_released', h.owner_token))
             FROM (SELECT w.owner_token FROM /* TEMPLATE: schema */pgfence_waiters AS w
                    WHERE w.lock_key = l.lock_key AND w.expires_at > now()
                    ORDER BY w.ticket LIMIT 1) AS h) >= 0 AS released;

-- name: ListWaiters :many
-- The fair waiters whose place has not expired, by key and in queue order.
SELECT lock_key, owner, ticket,
       (row_number() OVER (PARTITION BY lock_key ORDER BY ticket) - 1)::bigint AS position,
       (extract(epoch FROM GREATEST(expires_at - now(), interval '0')) * 1000000)::bigint AS place_micros
  FROM /* TEMPLATE: schema */pgfence_waiters
 WHERE expires_at > now()
 ORDER BY lock_key, ticket;
