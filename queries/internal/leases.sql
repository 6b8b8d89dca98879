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
SELECT r.owner_token::text AS owner_token, r.fence::bigint AS fence, r.expires_at::timestamptz AS expires_at
  FROM /* TEMPLATE: schema */pgfence_lease_acquire_batch(sqlc.arg(owner)::text, sqlc.arg(lock_keys)::text[], sqlc.arg(owner_tokens)::text[],
       sqlc.arg(ttls_micros)::bigint[]) AS r;

-- name: ReleaseNotify :one
-- Release that also sends NOTIFY pgfence_lease_released with the key as
-- payload, for waiters that listen (pglease's WithWakeOnRelease).
-- PostgreSQL delivers it only when this statement's transaction commits, so
-- no waiter wakes before the lease is free. It is opt-in because it is not
-- free: notifying transactions commit one at a time (PostgreSQL serialises
-- them on a global lock), which halved release throughput at 8+ concurrent
-- clients with fsync on.
SELECT r.released::boolean AS released
  FROM /* TEMPLATE: schema */pgfence_lease_release(sqlc.arg(lock_key)::text, sqlc.arg(fence)::bigint, 0, sqlc.arg(durable)::boolean, true) AS r;

-- name: FindByOwnerToken :one
-- Resolves an ambiguous acquisition: the unexpired lease granted to this
-- owner token, if the acquisition did take effect.
SELECT r.fence::bigint AS fence, r.expires_at::timestamptz AS expires_at
  FROM /* TEMPLATE: schema */pgfence_lease_find(sqlc.arg(lock_key)::text, sqlc.arg(owner_token)::text) AS r;

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
SELECT r::bigint AS fence
  FROM /* TEMPLATE: schema */pgfence_lease_abandon(p_notify => sqlc.arg(notify)::boolean, p_token => sqlc.arg(owner_token)::text,
       p_key => sqlc.arg(lock_key)::text) AS r;

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
SELECT r.o_scanned::bigint AS scanned, r.o_last_key::text AS last_key, r.o_last_slot::integer AS last_slot,
       r.o_deleted::bigint AS deleted
  FROM /* TEMPLATE: schema */pgfence_sweep_leases(sqlc.arg(after_key)::text, sqlc.arg(after_slot)::integer, sqlc.arg(batch_size)::int,
       sqlc.arg(grace_micros)::bigint) AS r;

-- name: SweepAbandonedTokensBatch :one
-- One batch of the sweep of tombstones older than the retention
-- (pglease.AbandonedTokenRetention), walked by owner_token like
-- SweepExpiredBatch and committed asynchronously for the same reason: a
-- tombstone that outlives a crash only waits for the next sweep.
SELECT r.o_scanned::bigint AS scanned, r.o_last_token::text AS last_token, r.o_deleted::bigint AS deleted
  FROM /* TEMPLATE: schema */pgfence_sweep_tombstones(sqlc.arg(after_token)::text, sqlc.arg(batch_size)::int,
       sqlc.arg(retention_micros)::bigint) AS r;

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
SELECT /* TEMPLATE: schema */pgfence_sweep_places(sqlc.arg(grace_micros)::bigint, sqlc.arg(batch_size)::int)::bigint AS most_deleted;
