-- name: Acquire :one
-- Grants the lease when the key is free or its lease has expired by the
-- database clock, and returns the new fence and expiry. When the key is held
-- by someone else (an unexpired lease, whoever owns it), or when pglease gave
-- up this owner token after an ambiguous acquisition, it returns no row
-- (pgx.ErrNoRows) and writes nothing but a drawn fence. It never waits for a
-- holder: use a fresh owner_token per acquisition and retry on no row.
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
-- would re-plan in every statement): pass a key of 1-512 bytes, as pglease
-- does (it refuses others before they are sent).
INSERT INTO /* TEMPLATE: schema */lock_leases AS l (lock_key, owner, owner_token, fence, acquired_at, expires_at)
SELECT sqlc.arg(lock_key)::text, sqlc.arg(owner)::text, sqlc.arg(owner_token)::text,
       /* TEMPLATE: schema */pgfence_draw_fence(), now(),
       now() + sqlc.arg(ttl_micros)::bigint * interval '1 microsecond'
 WHERE /* TEMPLATE: schema */pgfence_commit_durably()
   AND set_config('lock_timeout', '1s', true) IS NOT NULL
   AND NOT EXISTS (SELECT FROM /* TEMPLATE: schema */pgfence_abandoned_tokens AS a WHERE a.owner_token = sqlc.arg(owner_token)::text)
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
RETURNING l.fence, l.expires_at;

-- name: Renew :one
-- Extends the lease to now() + ttl_micros while it is unexpired and still
-- carries this fence, and returns the new expiry. It never resurrects an
-- expired lease and never touches another holder's: no row (pgx.ErrNoRows)
-- means the lease is lost, and nothing was written.
-- It commits durably whatever the session says: a renewal lost in a crash
-- would leave the holder believing in an expiry the server forgot.
UPDATE /* TEMPLATE: schema */lock_leases
   SET expires_at = now() + sqlc.arg(ttl_micros)::bigint * interval '1 microsecond'
 WHERE lock_key = sqlc.arg(lock_key)
   AND slot = 0
   AND kind = 'exclusive'
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
   AND slot = 0
   AND kind = 'exclusive'
   AND fence = sqlc.arg(fence)
   AND expires_at > now()
   AND CASE WHEN sqlc.arg(durable)::boolean THEN /* TEMPLATE: schema */pgfence_commit_durably()
            ELSE set_config('synchronous_commit', 'off', true) = 'off' END
RETURNING true AS released;

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
