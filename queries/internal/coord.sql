-- name: AcquireKind :one
-- One attempt to take a key in a kind ('exclusive', 'shared', 'permit' with
-- its number of permits) as the key's holders allow now
-- (pgfence_acquire_kind in migration 000013, through pgfence_attempt in
-- 000014, which checks the arguments): slot, fence and expiry when
-- granted; no row when refused. With place_micros > 0, a refused exclusive
-- attempt on a key held shared keeps a place that keeps new shared leases
-- out for that long. SQLSTATE PF007 when the key is held in a kind that
-- cannot share it.
SELECT r.slot::integer AS slot, r.fence::bigint AS fence, r.expires_at::timestamptz AS expires_at
  FROM /* TEMPLATE: schema */pgfence_attempt(sqlc.arg(lock_key)::text, sqlc.arg(kind)::text, sqlc.arg(permits)::integer,
       sqlc.arg(owner)::text, sqlc.arg(owner_token)::text, sqlc.arg(ttl_micros)::bigint,
       sqlc.arg(place_micros)::bigint, false) AS r
 WHERE r.fence IS NOT NULL;

-- name: AcquireQueued :one
-- One attempt of a fair waiter of any kind: slot, fence and expiry when
-- granted, else fence 0 and the number of waiters ahead (-1: the owner
-- token was abandoned).
SELECT coalesce(r.slot, 0)::integer AS slot, coalesce(r.fence, 0)::bigint AS fence,
       coalesce(r.expires_at, now())::timestamptz AS expires_at, coalesce(r.ahead, -1)::integer AS ahead
  FROM /* TEMPLATE: schema */pgfence_attempt(sqlc.arg(lock_key)::text, sqlc.arg(kind)::text, sqlc.arg(permits)::integer,
       sqlc.arg(owner)::text, sqlc.arg(owner_token)::text, sqlc.arg(ttl_micros)::bigint,
       sqlc.arg(place_micros)::bigint, true) AS r;

-- name: LeaveQueue :exec
-- A waiter that gives up (or was granted another way) gives its place back.
SELECT /* TEMPLATE: schema */pgfence_leave_queue(sqlc.arg(lock_key)::text, sqlc.arg(owner_token)::text);

-- name: RenewSlot :one
-- Extends a shared holder's or permit's grant (pgfence_renew_slot), matched
-- on key and fence, only while unexpired: never resurrects one. No row: lost.
SELECT r.expires_at::timestamptz AS expires_at
  FROM /* TEMPLATE: schema */pgfence_renew_grant(sqlc.arg(lock_key)::text, sqlc.arg(fence)::bigint, sqlc.arg(ttl_micros)::bigint) AS r;

-- name: ReleaseSlot :one
-- Gives a shared holder's or permit's grant back (pgfence_release_slot),
-- matched on key and fence, with its minimum hold; asynchronous commit unless
-- durable; with notify, NOTIFY pgfence_lease_released with the key for
-- waiters that do not queue. No row: it was not held any more.
SELECT r.released::boolean AS released
  FROM /* TEMPLATE: schema */pgfence_release_grant(sqlc.arg(lock_key)::text, sqlc.arg(fence)::bigint, sqlc.arg(hold_micros)::bigint,
       sqlc.arg(durable)::boolean, sqlc.arg(notify)::boolean) AS r;

-- name: SlotFence :one
-- The fence a slot's row carries now, held or not (after a release that
-- found nothing: expired, or taken by another holder).
SELECT fence FROM /* TEMPLATE: schema */lock_leases WHERE lock_key = sqlc.arg(lock_key) AND slot = sqlc.arg(slot);

-- name: FindSlotByOwnerToken :one
-- Resolves an ambiguous attempt through AcquireKind or AcquireQueued: the
-- unexpired grant under the owner token, in whichever slot.
SELECT r.slot::integer AS slot, r.fence::bigint AS fence, r.expires_at::timestamptz AS expires_at
  FROM /* TEMPLATE: schema */pgfence_lease_find(sqlc.arg(lock_key)::text, sqlc.arg(owner_token)::text) AS r;

-- name: AbandonSlot :many
-- Gives up an ambiguous attempt through AcquireKind or AcquireQueued:
-- tombstones the token and releases what it holds (pgfence_abandon_slot).
SELECT r::bigint AS fence FROM /* TEMPLATE: schema */pgfence_abandon_grant(sqlc.arg(lock_key)::text, sqlc.arg(owner_token)::text) AS r;

-- name: AcquireKeySet :many
-- Takes several keys exclusively, all or none, each with its own
-- fence; SQLSTATE PF008 (and nothing granted) when any is held, in any kind.
SELECT r.lock_key::text AS lock_key, r.fence::bigint AS fence, r.expires_at::timestamptz AS expires_at
  FROM /* TEMPLATE: schema */pgfence_take_set(sqlc.arg(lock_keys)::text[], sqlc.arg(owner)::text,
       sqlc.arg(owner_token)::text, sqlc.arg(ttl_micros)::bigint) AS r;

-- name: ReleaseHeldAtLeast :one
-- Release of a mutex lease with a minimum hold: the lease stays held until
-- its grant time plus hold_micros by the database clock, if that is later
-- than now; otherwise it is Release. Matched on key and fence.
SELECT r.released::boolean AS released
  FROM /* TEMPLATE: schema */pgfence_lease_release(p_hold_micros => sqlc.arg(hold_micros)::bigint, p_key => sqlc.arg(lock_key)::text,
       p_fence => sqlc.arg(fence)::bigint, p_durable => sqlc.arg(durable)::boolean, p_notify => false) AS r;

-- name: ReleaseKeySet :many
-- Release of a key set's mutex leases in one statement, each matched on its
-- key and fence, each with its minimum hold (as ReleaseHeldAtLeast; 0 for
-- none): the keys it released; a key not returned was not held any more.
-- With notify, each released key is sent as NOTIFY pgfence_lease_released's
-- payload, as ReleaseNotify does. The rows are locked in key order first, as
-- pgfence_acquire_set takes them, so that a release and an acquisition of
-- overlapping sets never deadlock.
SELECT r.lock_key::text AS lock_key
  FROM /* TEMPLATE: schema */pgfence_release_set(p_durable => sqlc.arg(durable)::boolean, p_notify => sqlc.arg(notify)::boolean,
       p_keys => sqlc.arg(lock_keys)::text[], p_fences => sqlc.arg(fences)::bigint[],
       p_holds_micros => sqlc.arg(hold_micros)::bigint[]) AS r;

-- name: RenewKeySet :many
-- Renewal of a key set's mutex leases in one statement, each matched on its
-- key and fence and only while unexpired (never resurrects one): the keys
-- renewed, with their new expiry. It commits durably. Rows are locked in
-- key order first, as ReleaseKeySet explains.
SELECT r.lock_key::text AS lock_key, r.expires_at::timestamptz AS expires_at
  FROM /* TEMPLATE: schema */pgfence_renew_set(p_ttl_micros => sqlc.arg(ttl_micros)::bigint, p_keys => sqlc.arg(lock_keys)::text[],
       p_fences => sqlc.arg(fences)::bigint[]) AS r;

-- name: ListPermits :many
-- Every unexpired shared holder and permit, by key and slot, with its key's
-- number of permits (0: shared). slot is the holder's slot among its key's,
-- from 0. Infinite timestamps read as fencedb's GetLease reads them.
SELECT p.lock_key, p.permits, (p.slot - 1)::integer AS slot, (p.kind = 'exclusive')::boolean AS exclusive,
       p.owner, p.fence,
       COALESCE(CASE p.acquired_at WHEN 'infinity' THEN timestamptz '294276-12-31 23:59:59.999999+00'
                                   WHEN '-infinity' THEN timestamptz '4714-11-24 00:00:00+00 BC' END, p.acquired_at) AS acquired_at,
       COALESCE(CASE p.expires_at WHEN 'infinity' THEN timestamptz '294276-12-31 23:59:59.999999+00'
                                   WHEN '-infinity' THEN timestamptz '4714-11-24 00:00:00+00 BC' END, p.expires_at) AS expires_at,
       (CASE WHEN isfinite(p.expires_at) THEN LEAST(GREATEST(extract(epoch FROM p.expires_at - now()) * 1000000, 0), 9223372036854775)
             WHEN p.expires_at > now() THEN 9223372036854775 ELSE 0 END)::bigint AS remaining_micros,
       now()::timestamptz AS db_now
  FROM /* TEMPLATE: schema */lock_leases AS p
 WHERE p.slot > 0 AND p.expires_at > now()
 ORDER BY p.lock_key, p.slot;

-- name: ListExclusiveWaiters :many
-- Exclusive waiters that do not queue, whose place has not expired, by key:
-- while one waits, no new shared lease of its key is granted.
SELECT lock_key, count(*)::bigint AS waiting
  FROM /* TEMPLATE: schema */pgfence_waiters
 WHERE NOT queued AND expires_at > now()
 GROUP BY lock_key
 ORDER BY lock_key;

-- name: ListWaiters :many
-- The fair waiters whose place has not expired, by key and in queue order,
-- with the kind each asked for ('exclusive', 'shared' or 'permit'). An
-- infinite place expiry reads as fencedb's GetLease reads an expiry.
SELECT q.kind, q.lock_key, q.owner, q.ticket,
       (row_number() OVER (PARTITION BY q.lock_key ORDER BY q.ticket) - 1)::bigint AS position,
       (CASE WHEN isfinite(q.expires_at) THEN LEAST(GREATEST(extract(epoch FROM q.expires_at - now()) * 1000000, 0), 9223372036854775)
             WHEN q.expires_at > now() THEN 9223372036854775 ELSE 0 END)::bigint AS place_micros,
       COALESCE(CASE q.expires_at WHEN 'infinity' THEN timestamptz '294276-12-31 23:59:59.999999+00'
                                   WHEN '-infinity' THEN timestamptz '4714-11-24 00:00:00+00 BC' END, q.expires_at) AS expires_at,
       now()::timestamptz AS db_now
  FROM (SELECT w.kind, w.lock_key, w.owner, w.ticket, w.expires_at
          FROM /* TEMPLATE: schema */pgfence_waiters AS w
         WHERE w.queued AND w.expires_at > now()) AS q
 ORDER BY q.lock_key, q.ticket;

-- name: WatchPermits :many
-- Per key held shared or as permits now (by the database clock), or with an
-- exclusive waiter that does not queue, at most row_limit keys in key order:
-- its number of permits (0: shared), the unexpired shared holders or permits,
-- exclusive_held (always 0 here: an exclusive holder is a lease) and the
-- exclusive waiters that do not queue (the fair waiters are WatchWaiters').
SELECT h.lock_key, h.permits,
       (SELECT count(*) FROM /* TEMPLATE: schema */lock_leases AS p
         WHERE p.lock_key = h.lock_key AND p.slot > 0 AND p.expires_at > now())::bigint AS in_use,
       0::bigint AS exclusive_held,
       (SELECT count(*) FROM /* TEMPLATE: schema */pgfence_waiters AS w
         WHERE w.lock_key = h.lock_key AND NOT w.queued AND w.expires_at > now())::bigint AS waiters
  FROM /* TEMPLATE: schema */lock_leases AS h
 WHERE h.slot = 0 AND h.kind <> 'exclusive'
   AND (h.expires_at > now()
        OR EXISTS (SELECT FROM /* TEMPLATE: schema */pgfence_waiters AS w WHERE w.lock_key = h.lock_key AND NOT w.queued AND w.expires_at > now()))
 ORDER BY h.lock_key
 LIMIT sqlc.arg(row_limit);

-- name: WatchPermitHolders :many
-- The unexpired shared holders and permits, by key and slot (from 0), at
-- most row_limit of them, for the live page.
SELECT p.lock_key, (p.slot - 1)::integer AS slot, (p.kind = 'exclusive')::boolean AS exclusive, p.owner, p.fence,
       (CASE WHEN isfinite(p.expires_at) THEN LEAST(GREATEST(extract(epoch FROM p.expires_at - now()) * 1000000, 0), 9223372036854775)
             WHEN p.expires_at > now() THEN 9223372036854775 ELSE 0 END)::bigint AS remaining_micros
  FROM /* TEMPLATE: schema */lock_leases AS p
 WHERE p.slot > 0 AND p.expires_at > now()
 ORDER BY p.lock_key, p.slot
 LIMIT sqlc.arg(row_limit);

-- name: WatchWaiters :many
-- The fair waiters whose place has not expired, by key and in queue order
-- (as ListWaiters), at most row_limit of them, and the depth of each key's
-- queue.
SELECT q.kind, q.lock_key, q.owner,
       (row_number() OVER (PARTITION BY q.lock_key ORDER BY q.ticket) - 1)::bigint AS position,
       (count(*) OVER (PARTITION BY q.lock_key))::bigint AS depth,
       (CASE WHEN isfinite(q.expires_at) THEN LEAST(GREATEST(extract(epoch FROM q.expires_at - now()) * 1000000, 0), 9223372036854775)
             WHEN q.expires_at > now() THEN 9223372036854775 ELSE 0 END)::bigint AS place_micros
  FROM (SELECT w.kind, w.lock_key, w.owner, w.ticket, w.expires_at
          FROM /* TEMPLATE: schema */pgfence_waiters AS w
         WHERE w.queued AND w.expires_at > now()) AS q
 ORDER BY q.lock_key, q.ticket
 LIMIT sqlc.arg(row_limit);
