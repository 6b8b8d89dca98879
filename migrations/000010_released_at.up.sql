-- A lease's row records when its holder released it, so that a reader
-- (pgfence list and show, a dashboard) tells a lease released by its holder
-- from one that expired because its holder went away. Every release sets
-- released_at; every grant clears it, by the trigger below, since every
-- grant draws a new fence (whichever statement or function grants). NULL
-- on a lease that is held or that ran out. Only readers use it: expiry is
-- still decided by expires_at alone.
ALTER TABLE lock_leases ADD COLUMN released_at timestamptz;

CREATE FUNCTION pgfence_clear_released() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
  NEW.released_at := NULL;
  RETURN NEW;
END
$$;

-- The WHEN condition is checked without calling the function, so renewals
-- and releases (same fence) pay nothing for it.
CREATE TRIGGER pgfence_grant_clears_released
  BEFORE UPDATE ON lock_leases
  FOR EACH ROW
  WHEN (NEW.fence IS DISTINCT FROM OLD.fence)
  EXECUTE FUNCTION pgfence_clear_released();

-- The SQL release function, as in the baseline, but recording the release.
DO $do$
BEGIN
  -- A schema some other way brought to the baseline's version may lack the
  -- SQL lease functions (pgfence migrate version lists what is missing):
  -- there is nothing to replace then.
  IF to_regprocedure(format('%I.pgfence_release(text, bigint)', current_schema())) IS NULL THEN
    RETURN;
  END IF;
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
     SET expires_at = now(), released_at = now()
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
