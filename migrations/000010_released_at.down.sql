-- The SQL lease functions as the baseline defines them, then the column.
DO $do$
BEGIN
  -- A schema some other way brought to the baseline's version may lack the
  -- SQL lease functions (pgfence migrate version lists what is missing):
  -- there is nothing to replace then.
  IF to_regprocedure(format('%I.pgfence_release(text, bigint)', current_schema())) IS NULL THEN
    RETURN;
  END IF;
  -- Acquire: grants the lease when the key is free or its lease has expired
  -- by the database clock, and returns the new fence; no row when an
  -- unexpired lease exists. In the one statement: a durable commit whatever
  -- the session's synchronous_commit (a grant lost in a crash could hand its
  -- fence out twice); lock_timeout bounding the wait on a concurrent
  -- acquisition of the same key; and a conflicting row replaced only when it
  -- has expired and carries a lower fence than the one just drawn. The owner
  -- token is 244 random bits drawn here, so pglease's check that it has no
  -- tombstone always holds and is left out.
  EXECUTE format($sql$
CREATE OR REPLACE FUNCTION pgfence_acquire(key text, ttl interval, owner text)
RETURNS TABLE (fence bigint, expires_at timestamptz)
LANGUAGE sql VOLATILE
AS $fn$
  INSERT INTO %1$I.lock_leases AS l (lock_key, owner, owner_token, fence, acquired_at, expires_at)
  SELECT $1, $3, replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''),
         %1$I.pgfence_draw_fence(), now(),
         now() + (extract(epoch FROM $2) * 1000000)::bigint * interval '1 microsecond'
   WHERE %1$I.pgfence_check_lease_call('pgfence_acquire', $1, $2, $3, NULL)
     AND %1$I.pgfence_commit_durably()
     AND set_config('lock_timeout', '1s', true) IS NOT NULL
  ON CONFLICT (lock_key) DO UPDATE
     SET owner       = EXCLUDED.owner,
         owner_token = EXCLUDED.owner_token,
         fence       = EXCLUDED.fence,
         acquired_at = EXCLUDED.acquired_at,
         expires_at  = EXCLUDED.expires_at
   WHERE l.expires_at <= now()
     AND l.fence < EXCLUDED.fence
  RETURNING l.fence, l.expires_at
$fn$
$sql$, current_schema());

  -- Renew: extends the lease only while it is unexpired and still carries
  -- this fence, so it never resurrects an expired lease; no row means the
  -- lease is lost. It commits durably: a renewal lost in a crash would leave
  -- the holder believing in an expiry the server forgot.
  EXECUTE format($sql$
CREATE OR REPLACE FUNCTION pgfence_renew(key text, fence bigint, ttl interval)
RETURNS TABLE (expires_at timestamptz)
LANGUAGE sql VOLATILE
AS $fn$
  UPDATE %1$I.lock_leases
     SET expires_at = now() + (extract(epoch FROM $3) * 1000000)::bigint * interval '1 microsecond'
   WHERE %1$I.pgfence_check_lease_call('pgfence_renew', $1, $3, NULL, $2)
     AND lock_key = $1
     AND fence = $2
     AND expires_at > now()
     AND %1$I.pgfence_commit_durably()
  RETURNING expires_at
$fn$
$sql$, current_schema());

  -- Release: expires a held lease now, matched on key and fence, so a newer
  -- holder's lease is never touched; one row when it released the caller's
  -- grant, no row when it was not held any more. It commits asynchronously:
  -- set_config(..., true) inside a function lasts until the end of the
  -- calling transaction, which in autocommit is the call's own, so that
  -- commit does not wait for the disk. A release lost in a crash only makes
  -- the lease run to its TTL, and the next durable commit on the server (any
  -- acquisition) flushes it anyway.
  EXECUTE format($sql$
CREATE OR REPLACE FUNCTION pgfence_release(key text, fence bigint)
RETURNS TABLE (released boolean)
LANGUAGE sql VOLATILE
AS $fn$
  UPDATE %1$I.lock_leases
     SET expires_at = now()
   WHERE %1$I.pgfence_check_lease_call('pgfence_release', $1, NULL, NULL, $2)
     AND lock_key = $1
     AND fence = $2
     AND expires_at > now()
     AND set_config('synchronous_commit', 'off', true) = 'off'
  RETURNING true
$fn$
$sql$, current_schema());
END
$do$;

ALTER TABLE lock_leases DROP COLUMN released_at;
