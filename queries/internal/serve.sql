-- name: WatchLeaseSummary :one
-- How many leases are held now and how many of those expire within
-- soon_micros, by the database clock, and the database's now().
SELECT now()::timestamptz AS db_now,
       count(*) FILTER (WHERE expires_at > now()) AS held,
       count(*) FILTER (WHERE expires_at > now()
                          AND expires_at <= now() + sqlc.arg(soon_micros)::bigint * interval '1 microsecond') AS expiring_soon
  FROM /* TEMPLATE: schema */lock_leases
 WHERE slot = 0 AND kind = 'exclusive';

-- name: WatchHeldLeases :many
-- The held leases, at most row_limit of them, in key order (a stable set of
-- keys from one read to the next), with the time left by the database clock.
-- Infinite timestamps read as fencedb's GetLease reads them.
SELECT lock_key, owner, fence,
       COALESCE(CASE acquired_at WHEN 'infinity' THEN timestamptz '294276-12-31 23:59:59.999999+00'
                                 WHEN '-infinity' THEN timestamptz '4714-11-24 00:00:00+00 BC' END, acquired_at) AS acquired_at,
       COALESCE(CASE expires_at WHEN 'infinity' THEN timestamptz '294276-12-31 23:59:59.999999+00'
                                WHEN '-infinity' THEN timestamptz '4714-11-24 00:00:00+00 BC' END, expires_at) AS expires_at,
       (CASE WHEN isfinite(expires_at) THEN LEAST(GREATEST(extract(epoch FROM expires_at - now()) * 1000000, 0), 9223372036854775)
             WHEN expires_at > now() THEN 9223372036854775 ELSE 0 END)::bigint AS remaining_micros
  FROM /* TEMPLATE: schema */lock_leases
 WHERE expires_at > now() AND slot = 0 AND kind = 'exclusive'
 ORDER BY lock_key
 LIMIT sqlc.arg(row_limit);

-- name: WatchJobCounts :many
-- Jobs by queue and state, at most row_limit groups, in queue order.
SELECT queue, state, count(*) AS jobs
  FROM /* TEMPLATE: schema */pgfence_jobs
 GROUP BY queue, state
 ORDER BY queue, state
 LIMIT sqlc.arg(row_limit);

-- name: WatchOldestRunnable :many
-- Per queue, the age by the database clock of the oldest runnable job: an
-- available job whose run_at has passed has been runnable since run_at. Uses
-- the claim index (state = 'available').
SELECT queue, (extract(epoch FROM now() - min(run_at)) * 1000000)::bigint AS age_micros
  FROM /* TEMPLATE: schema */pgfence_jobs
 WHERE state = 'available' AND run_at <= now()
 GROUP BY queue
 ORDER BY queue
 LIMIT sqlc.arg(row_limit);

-- name: WatchStaleRefusals :one
-- The count of stale writes refused by the fencing trigger, read from the
-- sequence pgfence_stale_refusals (the trigger draws from it when it refuses:
-- nextval survives the refused transaction's rollback). present is false when
-- the sequence does not exist (a schema from before it was added); refusals
-- is 0 when it exists but was never drawn from. sequence is its name,
-- qualified with the watched schema when there is one: a bound value, since a
-- name inside a string takes no schema marker.
SELECT (to_regclass(sqlc.arg(sequence)::text) IS NOT NULL)::boolean AS present,
       coalesce(pg_sequence_last_value(to_regclass(sqlc.arg(sequence)::text)), 0)::bigint AS refusals;
