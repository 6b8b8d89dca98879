-- A release wakes one fair waiter's client, and only when the key has a
-- fair waiter.
--
-- The release trigger of migration 000011 called its PL/pgSQL function on
-- every release, which cost a mutex acquire + release about a tenth of its
-- throughput when nobody waited (nearly always). A flag on the lease row,
-- set by a fair waiter that is refused and recomputed by each fair grant,
-- lets the trigger's WHEN condition skip the call without leaving the row.
-- The flag is exact for fair waiters, whose attempts run under the key's
-- queue lock; a plain acquisition keeps the row's flag as it is. A waiter
-- whose wake-up is missed (its key had no row when it queued, and a plain
-- acquisition created one) still retries on its backoff timer.
--
-- And every wake-up went out on one channel that every client's listener
-- LISTENs on, so each hand-off woke a connection and a process per client
-- though only one waiter was meant. A fair waiter's owner token of the form
-- wake.<8 hex digits>.<anything> is now woken on the channel
-- pgfence_wake_<those digits>, which only its client LISTENs on (pglease
-- gives each client its own digits); any other token is woken on
-- pgfence_lease_released, as before.

ALTER TABLE lock_leases ADD COLUMN has_waiters boolean NOT NULL DEFAULT false;

DROP TRIGGER pgfence_release_wakes_waiter ON lock_leases;
CREATE TRIGGER pgfence_release_wakes_waiter
  AFTER UPDATE ON lock_leases
  FOR EACH ROW
  WHEN (NEW.has_waiters AND NEW.fence = OLD.fence AND NEW.expires_at < OLD.expires_at)
  EXECUTE FUNCTION pgfence_wake_on_lease_change();

DO $migration$
BEGIN
  -- pgfence_acquire_fifo as migration 000011 defines it, but a refused
  -- attempt marks the key's lease row has_waiters, and a grant sets it to
  -- whether another live waiter remains.
  EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.pgfence_acquire_fifo(p_key text, p_owner text, p_token text, p_ttl_micros bigint, p_place_micros bigint)
RETURNS TABLE (fence bigint, expires_at timestamptz, ahead integer)
LANGUAGE plpgsql VOLATILE
AS $body$
DECLARE
  mine bigint;
  n    integer;
BEGIN
  PERFORM %1$I.pgfence_commit_durably(), set_config('lock_timeout', '1s', true);
  PERFORM pg_advisory_xact_lock(hashtextextended('pgfence_waiters:' || p_key, 0));
  IF EXISTS (SELECT FROM %1$I.pgfence_abandoned_tokens AS a WHERE a.owner_token = p_token) THEN
    RETURN QUERY SELECT NULL::bigint, NULL::timestamptz, NULL::integer;
    RETURN;
  END IF;
  INSERT INTO %1$I.pgfence_waiters AS w (lock_key, owner_token, owner, ticket, expires_at)
  VALUES (p_key, p_token, p_owner, nextval(%2$L), now() + p_place_micros * interval '1 microsecond')
  ON CONFLICT ON CONSTRAINT pgfence_waiters_pkey DO UPDATE SET expires_at = EXCLUDED.expires_at
  RETURNING w.ticket INTO mine;
  SELECT count(*) INTO n FROM %1$I.pgfence_waiters AS w
   WHERE w.lock_key = p_key AND w.ticket < mine AND w.expires_at > now();
  IF n = 0 THEN
    RETURN QUERY
    INSERT INTO %1$I.lock_leases AS l (lock_key, owner, owner_token, fence, acquired_at, expires_at, has_waiters)
    VALUES (p_key, p_owner, p_token, %1$I.pgfence_draw_fence(), now(), now() + p_ttl_micros * interval '1 microsecond',
            EXISTS (SELECT FROM %1$I.pgfence_waiters AS w
                     WHERE w.lock_key = p_key AND w.owner_token <> p_token AND w.expires_at > now()))
    ON CONFLICT ON CONSTRAINT lock_leases_pkey DO UPDATE
       SET owner       = EXCLUDED.owner,
           owner_token = EXCLUDED.owner_token,
           fence       = EXCLUDED.fence,
           acquired_at = EXCLUDED.acquired_at,
           expires_at  = EXCLUDED.expires_at,
           has_waiters = EXCLUDED.has_waiters
     WHERE l.expires_at <= now()
       AND l.fence < EXCLUDED.fence
    RETURNING l.fence, l.expires_at, 0;
    IF FOUND THEN
      DELETE FROM %1$I.pgfence_waiters AS w
       WHERE w.lock_key = p_key AND (w.owner_token = p_token OR w.expires_at <= now());
      RETURN;
    END IF;
  END IF;
  UPDATE %1$I.lock_leases AS l SET has_waiters = true
   WHERE l.lock_key = p_key AND NOT l.has_waiters;
  PERFORM %1$I.pgfence_refused_async();
  RETURN QUERY SELECT NULL::bigint, NULL::timestamptz, n;
END
$body$;
$f$, current_schema(), format('%I.pgfence_waiter_seq', current_schema()));
END
$migration$;

-- pgfence_wake_channel: the channel a fair waiter's wake-up goes on.
CREATE FUNCTION pgfence_wake_channel(p_token text) RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
  SELECT CASE WHEN p_token ~ '^wake\.[0-9a-f]{8}\.' THEN 'pgfence_wake_' || substr(p_token, 6, 8) ELSE 'pgfence_lease_released' END
$$;

DO $migration2$
BEGIN
  -- The wake-ups of migration 000011, sent on pgfence_wake_channel.
  -- pgfence_wake_lease_waiter: when key's mutex lease is free, sends NOTIFY
  -- on the channel of the key's first fair waiter with its owner token as
  -- the payload (delivered when the calling transaction commits):
  -- one waiter is woken, not every one. PL/pgSQL, so that its plans are
  -- cached per session.
  EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.pgfence_wake_lease_waiter(p_key text) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $body$
DECLARE
  head text;
BEGIN
  SELECT w.owner_token INTO head FROM %1$I.pgfence_waiters AS w
   WHERE w.lock_key = p_key AND w.expires_at > now()
   ORDER BY w.ticket LIMIT 1;
  IF head IS NULL THEN
    RETURN;
  END IF;
  IF EXISTS (SELECT FROM %1$I.lock_leases AS l WHERE l.lock_key = p_key AND l.expires_at > now()) THEN
    RETURN;
  END IF;
  PERFORM pg_notify(%1$I.pgfence_wake_channel(head), head);
END
$body$;
$f$, current_schema());

  -- pgfence_wake_permit_waiters: the same for a semaphore or shared/exclusive
  -- key: the first waiters that a free permit could be granted to. For a
  -- semaphore, as many as there are free permits; for a shared/exclusive key
  -- with no exclusive holder, the shared waiters ahead of the first
  -- exclusive one (granted together), or the first waiter when nothing is
  -- held.
  EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.pgfence_wake_permit_waiters(p_key text) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $body$
DECLARE
  cap   integer;
  held  integer;
  xheld boolean;
BEGIN
  IF NOT EXISTS (SELECT FROM %1$I.pgfence_permit_waiters AS w WHERE w.lock_key = p_key AND w.expires_at > now()) THEN
    RETURN;
  END IF;
  SELECT s.permits INTO cap FROM %1$I.pgfence_semaphores AS s WHERE s.lock_key = p_key;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  SELECT count(*), coalesce(bool_or(p.exclusive), false) INTO held, xheld
    FROM %1$I.pgfence_permits AS p WHERE p.lock_key = p_key AND p.expires_at > now();
  IF cap > 0 THEN
    PERFORM pg_notify(%1$I.pgfence_wake_channel(w.owner_token), w.owner_token)
       FROM (SELECT w.owner_token FROM %1$I.pgfence_permit_waiters AS w
              WHERE w.lock_key = p_key AND w.expires_at > now()
              ORDER BY w.ticket LIMIT greatest(cap - held, 0)) AS w;
  ELSIF NOT xheld THEN
    PERFORM pg_notify(%1$I.pgfence_wake_channel(w.owner_token), w.owner_token)
       FROM (SELECT w.owner_token, w.exclusive,
                    bool_or(w.exclusive) OVER (ORDER BY w.ticket ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS after_exclusive,
                    row_number() OVER (ORDER BY w.ticket) AS n
               FROM %1$I.pgfence_permit_waiters AS w
              WHERE w.lock_key = p_key AND w.expires_at > now()
              ORDER BY w.ticket LIMIT 1000) AS w
      WHERE (NOT w.exclusive AND NOT coalesce(w.after_exclusive, false))
         OR (w.exclusive AND w.n = 1 AND held = 0);
  END IF;
END
$body$;
$f$, current_schema());

END
$migration2$;
