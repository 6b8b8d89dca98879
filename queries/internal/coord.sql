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
-- mutex's Release. With notify, the key is sent as NOTIFY
-- pgfence_lease_released's payload, as ReleaseNotify does, for waiters
-- that do not queue (the fair ones are woken by the release's trigger).
UPDATE /* TEMPLATE: schema */pgfence_permits
   SET expires_at = GREATEST(now(), acquired_at + sqlc.arg(hold_micros)::bigint * interval '1 microsecond')
 WHERE lock_key = sqlc.arg(lock_key)
   AND slot = sqlc.arg(slot)
   AND fence = sqlc.arg(fence)
   AND expires_at > now()
   AND CASE WHEN sqlc.arg(durable)::boolean THEN /* TEMPLATE: schema */pgfence_commit_durably()
            ELSE set_config('synchronous_commit', 'off', true) = 'off' END
RETURNING CASE WHEN sqlc.arg(notify)::boolean THEN pg_notify('pgfence_lease_released', lock_key) IS NOT NULL
               ELSE true END AS released;

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
-- Infinite timestamps read as fencedb's GetLease reads them.
SELECT p.lock_key, s.permits, p.slot, p.exclusive, p.owner, p.fence,
       COALESCE(CASE p.acquired_at WHEN 'infinity' THEN timestamptz '294276-12-31 23:59:59.999999+00'
                                   WHEN '-infinity' THEN timestamptz '4714-11-24 00:00:00+00 BC' END, p.acquired_at) AS acquired_at,
       COALESCE(CASE p.expires_at WHEN 'infinity' THEN timestamptz '294276-12-31 23:59:59.999999+00'
                                  WHEN '-infinity' THEN timestamptz '4714-11-24 00:00:00+00 BC' END, p.expires_at) AS expires_at,
       (CASE WHEN isfinite(p.expires_at) THEN LEAST(GREATEST(extract(epoch FROM p.expires_at - now()) * 1000000, 0), 9223372036854775)
             WHEN p.expires_at > now() THEN 9223372036854775 ELSE 0 END)::bigint AS remaining_micros,
       now()::timestamptz AS db_now
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
-- exclusive lease (0 or 1) and the exclusive waiters (the fair waiters are
-- WatchWaiters').
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

-- name: ListWaiters :many
-- The fair waiters whose place has not expired, by key and in queue order:
-- kind is 'lease' for a mutex lease's waiter, 'permit' for a semaphore's,
-- 'shared' or 'exclusive' for a shared/exclusive key's (the mutex leases
-- and the other kinds are separate namespaces, so one key may have both).
-- An infinite place expiry reads as fencedb's GetLease reads an expiry.
SELECT q.kind, q.lock_key, q.owner, q.ticket,
       (row_number() OVER (PARTITION BY q.kind = 'lease', q.lock_key ORDER BY q.ticket) - 1)::bigint AS position,
       (CASE WHEN isfinite(q.expires_at) THEN LEAST(GREATEST(extract(epoch FROM q.expires_at - now()) * 1000000, 0), 9223372036854775)
             WHEN q.expires_at > now() THEN 9223372036854775 ELSE 0 END)::bigint AS place_micros,
       COALESCE(CASE q.expires_at WHEN 'infinity' THEN timestamptz '294276-12-31 23:59:59.999999+00'
                                  WHEN '-infinity' THEN timestamptz '4714-11-24 00:00:00+00 BC' END, q.expires_at) AS expires_at,
       now()::timestamptz AS db_now
  FROM (SELECT 'lease'::text AS kind, w.lock_key, w.owner, w.ticket, w.expires_at
          FROM /* TEMPLATE: schema */pgfence_waiters AS w
         WHERE w.expires_at > now()
        UNION ALL
        SELECT CASE WHEN s.permits > 0 THEN 'permit' WHEN w.exclusive THEN 'exclusive' ELSE 'shared' END,
               w.lock_key, w.owner, w.ticket, w.expires_at
          FROM /* TEMPLATE: schema */pgfence_permit_waiters AS w
          JOIN /* TEMPLATE: schema */pgfence_semaphores AS s ON s.lock_key = w.lock_key
         WHERE w.expires_at > now()) AS q
 ORDER BY q.lock_key, q.kind = 'lease' DESC, q.ticket;

-- name: AcquirePermitFIFO :one
-- One attempt of a fair waiter for a permit (pgfence_acquire_permit_fifo in
-- migration 000011): slot and fence when granted, else fence 0 and the
-- number of waiters ahead (-1: the owner token was abandoned).
SELECT coalesce(r.slot, 0)::integer AS slot, coalesce(r.fence, 0)::bigint AS fence,
       coalesce(r.expires_at, now())::timestamptz AS expires_at, coalesce(r.ahead, -1)::integer AS ahead
  FROM /* TEMPLATE: schema */pgfence_acquire_permit_fifo(sqlc.arg(lock_key)::text, sqlc.arg(permits)::integer,
       sqlc.arg(owner)::text, sqlc.arg(owner_token)::text, sqlc.arg(ttl_micros)::bigint,
       sqlc.arg(place_micros)::bigint) AS r;

-- name: AcquireSharedFIFO :one
-- One attempt of a fair waiter for a shared or the exclusive lease
-- (pgfence_acquire_shared_fifo), answered as AcquirePermitFIFO.
SELECT coalesce(r.slot, 0)::integer AS slot, coalesce(r.fence, 0)::bigint AS fence,
       coalesce(r.expires_at, now())::timestamptz AS expires_at, coalesce(r.ahead, -1)::integer AS ahead
  FROM /* TEMPLATE: schema */pgfence_acquire_shared_fifo(sqlc.arg(lock_key)::text, sqlc.arg(exclusive)::boolean,
       sqlc.arg(owner)::text, sqlc.arg(owner_token)::text, sqlc.arg(ttl_micros)::bigint,
       sqlc.arg(place_micros)::bigint) AS r;

-- name: LeavePermitQueue :exec
-- A fair waiter of a semaphore or shared/exclusive key that gives up leaves
-- the queue, and the exclusive waiters.
WITH x AS (
  DELETE FROM /* TEMPLATE: schema */pgfence_exclusive_waiters AS x
   WHERE x.lock_key = sqlc.arg(lock_key)::text AND x.owner_token = sqlc.arg(owner_token)::text
)
DELETE FROM /* TEMPLATE: schema */pgfence_permit_waiters AS w
 WHERE w.lock_key = sqlc.arg(lock_key)::text AND w.owner_token = sqlc.arg(owner_token)::text;

-- name: ReleaseKeySet :many
-- Release of a key set's mutex leases in one statement, each matched on its
-- key and fence, each with its minimum hold (as ReleaseHeldAtLeast; 0 for
-- none): the keys it released; a key not returned was not held any more.
-- With notify, each released key is sent as NOTIFY pgfence_lease_released's
-- payload, as ReleaseNotify does. The rows are locked in key order first, as
-- pgfence_acquire_set takes them, so that a release and an acquisition of
-- overlapping sets never deadlock.
WITH k AS (
  SELECT unnest(sqlc.arg(lock_keys)::text[]) AS lock_key, unnest(sqlc.arg(fences)::bigint[]) AS fence,
         unnest(sqlc.arg(hold_micros)::bigint[]) AS hold_micros
), locked AS (
  SELECT r.lock_key FROM /* TEMPLATE: schema */lock_leases AS r
   WHERE r.lock_key IN (SELECT k.lock_key FROM k)
   ORDER BY r.lock_key
     FOR UPDATE
)
UPDATE /* TEMPLATE: schema */lock_leases AS l
   SET expires_at = GREATEST(now(), l.acquired_at + k.hold_micros * interval '1 microsecond'),
       released_at = now()
  FROM k
 WHERE l.lock_key = k.lock_key
   AND l.lock_key IN (SELECT locked.lock_key FROM locked)
   AND l.fence = k.fence
   AND l.expires_at > now()
   AND CASE WHEN sqlc.arg(durable)::boolean THEN /* TEMPLATE: schema */pgfence_commit_durably()
            ELSE set_config('synchronous_commit', 'off', true) = 'off' END
RETURNING CASE WHEN sqlc.arg(notify)::boolean
               THEN (SELECT l.lock_key FROM (SELECT pg_notify('pgfence_lease_released', l.lock_key)) AS n)
               ELSE l.lock_key END::text AS lock_key;

-- name: RenewKeySet :many
-- Renewal of a key set's mutex leases in one statement, each matched on its
-- key and fence and only while unexpired (never resurrects one): the keys
-- renewed, with their new expiry. It commits durably. Rows are locked in
-- key order first, as ReleaseKeySet explains.
WITH k AS (
  SELECT unnest(sqlc.arg(lock_keys)::text[]) AS lock_key, unnest(sqlc.arg(fences)::bigint[]) AS fence
), locked AS (
  SELECT r.lock_key FROM /* TEMPLATE: schema */lock_leases AS r
   WHERE r.lock_key IN (SELECT k.lock_key FROM k)
   ORDER BY r.lock_key
     FOR UPDATE
)
UPDATE /* TEMPLATE: schema */lock_leases AS l
   SET expires_at = now() + sqlc.arg(ttl_micros)::bigint * interval '1 microsecond'
  FROM k
 WHERE l.lock_key = k.lock_key
   AND l.lock_key IN (SELECT locked.lock_key FROM locked)
   AND l.fence = k.fence
   AND l.expires_at > now()
   AND /* TEMPLATE: schema */pgfence_commit_durably()
RETURNING l.lock_key, l.expires_at;

-- name: WatchPermitHolders :many
-- The unexpired permits and shared/exclusive leases, by key and slot, at
-- most row_limit of them, for the live page. An infinite expiry's time left
-- saturates as fencedb's GetLease says.
SELECT p.lock_key, p.slot, p.exclusive, p.owner, p.fence,
       (CASE WHEN isfinite(p.expires_at) THEN LEAST(GREATEST(extract(epoch FROM p.expires_at - now()) * 1000000, 0), 9223372036854775)
             WHEN p.expires_at > now() THEN 9223372036854775 ELSE 0 END)::bigint AS remaining_micros
  FROM /* TEMPLATE: schema */pgfence_permits AS p
 WHERE p.expires_at > now()
 ORDER BY p.lock_key, p.slot
 LIMIT sqlc.arg(row_limit);

-- name: WatchWaiters :many
-- The fair waiters of every kind whose place has not expired, by key and in
-- queue order (as ListWaiters), at most row_limit of them, and the depth of
-- each key's queue. An infinite place expiry saturates as fencedb's
-- GetLease says.
SELECT q.kind, q.lock_key, q.owner,
       (row_number() OVER (PARTITION BY q.kind = 'lease', q.lock_key ORDER BY q.ticket) - 1)::bigint AS position,
       (count(*) OVER (PARTITION BY q.kind = 'lease', q.lock_key))::bigint AS depth,
       (CASE WHEN isfinite(q.expires_at) THEN LEAST(GREATEST(extract(epoch FROM q.expires_at - now()) * 1000000, 0), 9223372036854775)
             WHEN q.expires_at > now() THEN 9223372036854775 ELSE 0 END)::bigint AS place_micros
  FROM (SELECT 'lease'::text AS kind, w.lock_key, w.owner, w.ticket, w.expires_at
          FROM /* TEMPLATE: schema */pgfence_waiters AS w
         WHERE w.expires_at > now()
        UNION ALL
        SELECT CASE WHEN s.permits > 0 THEN 'permit' WHEN w.exclusive THEN 'exclusive' ELSE 'shared' END,
               w.lock_key, w.owner, w.ticket, w.expires_at
          FROM /* TEMPLATE: schema */pgfence_permit_waiters AS w
          JOIN /* TEMPLATE: schema */pgfence_semaphores AS s ON s.lock_key = w.lock_key
         WHERE w.expires_at > now()) AS q
 ORDER BY q.lock_key, q.kind = 'lease' DESC, q.ticket
 LIMIT sqlc.arg(row_limit);
