-- name: Acquire :one
-- Grants the lease when the key is free or its lease has expired by the
-- database clock, and returns the new fence and expiry. When the key is held
-- by someone else (an unexpired lease, whoever owns it), or when pglease gave
-- up this owner token after an ambiguous acquisition, it returns no row
-- (pgx.ErrNoRows) and writes nothing but a drawn fence. It never waits for a
-- holder: use a fresh owner_token per acquisition and retry on no row.
--
-- The statement runs in pgfence_lease_acquire (migration 000014), a
-- SECURITY DEFINER function: the writes of this file and of pglease go
-- through such functions, the only door a member of pgfence_client has to
-- pgfence's tables (docs/roles.md). It refuses (SQLSTATE PF005) a key
-- outside 1-512 bytes, an owner label or token outside 1-256 bytes, or a TTL
-- outside [10 ms, 24 h]. Its conditions, cheapest first, all inside its one
-- INSERT:
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
-- pgfence_draw_fence() is inlined into that INSERT, no function call. A
-- fence is drawn on every call, granted or not; gaps are harmless.
SELECT r.fence::bigint AS fence, r.expires_at::timestamptz AS expires_at
  FROM /* TEMPLATE: schema */pgfence_lease_acquire(sqlc.arg(lock_key)::text, sqlc.arg(owner)::text, sqlc.arg(owner_token)::text,
       sqlc.arg(ttl_micros)::bigint) AS r;

-- name: Renew :one
-- Extends the lease to now() + ttl_micros while it is unexpired and still
-- carries this fence, and returns the new expiry. It never resurrects an
-- expired lease and never touches another holder's: no row (pgx.ErrNoRows)
-- means the lease is lost, and nothing was written.
-- It commits durably whatever the session says: a renewal lost in a crash
-- would leave the holder believing in an expiry the server forgot.
SELECT r.expires_at::timestamptz AS expires_at
  FROM /* TEMPLATE: schema */pgfence_lease_renew(p_ttl_micros => sqlc.arg(ttl_micros)::bigint, p_key => sqlc.arg(lock_key)::text,
       p_fence => sqlc.arg(fence)::bigint) AS r;

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
SELECT r.released::boolean AS released
  FROM /* TEMPLATE: schema */pgfence_lease_release(sqlc.arg(lock_key)::text, sqlc.arg(fence)::bigint, 0, sqlc.arg(durable)::boolean, false) AS r;

-- name: LeaseFence :one
-- The fence the key's row carries now, held or not; no row when the key has
-- never been acquired (or its row was swept). After a Release that found
-- nothing to release, it tells "had expired" (still this fence) from "another
-- owner took the key" (another fence, or no row). It writes nothing.
SELECT fence FROM /* TEMPLATE: schema */lock_leases WHERE lock_key = sqlc.arg(lock_key) AND slot = 0;

-- name: GetLease :one
-- One key's row as the database clock sees it now, held or not (held and
-- remaining_micros say which). kind 'exclusive' is a plain (exclusive)
-- lease; 'shared' or 'permit' (owner empty, permits its number) says the
-- key is held, until expires_at at least, by shared holders or permits,
-- each in a row of its own (pgfence list shows them). released_at is set when its holder released
-- it, NULL when it is held or ran out. No row when the key has never been
-- acquired or its row was swept. It takes no lock and writes nothing.
-- pgfence never writes an infinite timestamp, but a role that may write the
-- table can: 'infinity' and '-infinity' read as PostgreSQL's largest and
-- smallest finite timestamptz (294276-12-31 23:59:59.999999 UTC, 4714-11-24
-- BC), since a time.Time cannot hold them, and remaining_micros saturates at
-- 9223372036854775, the longest time.Duration (about 292 years) in
-- microseconds, which an infinite expiry reads as.
SELECT lock_key, owner, fence,
       COALESCE(CASE acquired_at WHEN 'infinity' THEN timestamptz '294276-12-31 23:59:59.999999+00'
                                 WHEN '-infinity' THEN timestamptz '4714-11-24 00:00:00+00 BC' END, acquired_at) AS acquired_at,
       COALESCE(CASE expires_at WHEN 'infinity' THEN timestamptz '294276-12-31 23:59:59.999999+00'
                                WHEN '-infinity' THEN timestamptz '4714-11-24 00:00:00+00 BC' END, expires_at) AS expires_at,
       COALESCE(CASE released_at WHEN 'infinity' THEN timestamptz '294276-12-31 23:59:59.999999+00'
                                 WHEN '-infinity' THEN timestamptz '4714-11-24 00:00:00+00 BC' END, released_at) AS released_at,
       (expires_at > now())::boolean AS held,
       (CASE WHEN isfinite(expires_at) THEN LEAST(GREATEST(extract(epoch FROM expires_at - now()) * 1000000, 0), 9223372036854775)
             WHEN expires_at > now() THEN 9223372036854775 ELSE 0 END)::bigint AS remaining_micros,
       now()::timestamptz AS db_now, kind, permits
  FROM /* TEMPLATE: schema */lock_leases
 WHERE lock_key = sqlc.arg(lock_key) AND slot = 0;

-- name: ListLeases :many
-- Every key's row, held, released or expired, ordered by key, as of the
-- database clock now, read as GetLease reads one (infinite timestamps
-- included). It takes no lock and writes nothing.
SELECT lock_key, owner, fence,
       COALESCE(CASE acquired_at WHEN 'infinity' THEN timestamptz '294276-12-31 23:59:59.999999+00'
                                 WHEN '-infinity' THEN timestamptz '4714-11-24 00:00:00+00 BC' END, acquired_at) AS acquired_at,
       COALESCE(CASE expires_at WHEN 'infinity' THEN timestamptz '294276-12-31 23:59:59.999999+00'
                                WHEN '-infinity' THEN timestamptz '4714-11-24 00:00:00+00 BC' END, expires_at) AS expires_at,
       COALESCE(CASE released_at WHEN 'infinity' THEN timestamptz '294276-12-31 23:59:59.999999+00'
                                 WHEN '-infinity' THEN timestamptz '4714-11-24 00:00:00+00 BC' END, released_at) AS released_at,
       (expires_at > now())::boolean AS held,
       (CASE WHEN isfinite(expires_at) THEN LEAST(GREATEST(extract(epoch FROM expires_at - now()) * 1000000, 0), 9223372036854775)
             WHEN expires_at > now() THEN 9223372036854775 ELSE 0 END)::bigint AS remaining_micros,
       now()::timestamptz AS db_now, kind, permits
  FROM /* TEMPLATE: schema */lock_leases
 WHERE slot = 0
 ORDER BY lock_key;

-- name: NextFence :one
-- Draws a fence from the never-repeating source without taking a lease, for
-- token sources of your own (job rows, epochs): larger than every fence drawn
-- before it, by leases and jobs too. It commits durably whatever
-- the session's synchronous_commit (see pgfence_next_fence() in migration
-- 000005), so a fence it returned is never drawn again after a crash.
SELECT /* TEMPLATE: schema */pgfence_next_fence()::bigint AS fence;
