-- name: KeyHolders :many
-- One key's rows, in one snapshot, by slot: slot 0, the key's row (its
-- exclusive holder, or the summary of its shared holders or permits, as
-- fencedb's GetLease reads it), then every unexpired shared holder or permit
-- (slots from 1). No row when the key has never been acquired or its rows
-- were swept. Infinite timestamps read as GetLease reads them. It takes no
-- lock and writes nothing.
SELECT slot, kind, permits, owner, fence,
       COALESCE(CASE acquired_at WHEN 'infinity' THEN timestamptz '294276-12-31 23:59:59.999999+00'
                                 WHEN '-infinity' THEN timestamptz '4714-11-24 00:00:00+00 BC' END, acquired_at) AS acquired_at,
       (expires_at > now())::boolean AS held,
       (CASE WHEN isfinite(expires_at) THEN LEAST(GREATEST(extract(epoch FROM expires_at - now()) * 1000000, 0), 9223372036854775)
             WHEN expires_at > now() THEN 9223372036854775 ELSE 0 END)::bigint AS remaining_micros
  FROM /* TEMPLATE: schema */lock_leases
 WHERE lock_key = sqlc.arg(lock_key) AND (slot = 0 OR expires_at > now())
 ORDER BY slot;
