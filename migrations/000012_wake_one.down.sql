-- The wake-ups of migration 000011, on pgfence_lease_released.
DO $migration$
BEGIN
  -- pgfence_wake_lease_waiter: when key's mutex lease is free, sends NOTIFY
  -- pgfence_lease_released with the owner token of the key's first fair
  -- waiter as the payload (delivered when the calling transaction commits):
  -- one waiter is woken, not every one. PL/pgSQL, so that its plans are
  -- cached per session: it runs on every release, and most releases find
  -- no waiter, which it checks first.
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
  PERFORM pg_notify('pgfence_lease_released', head);
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
    PERFORM pg_notify('pgfence_lease_released', w.owner_token)
       FROM (SELECT w.owner_token FROM %1$I.pgfence_permit_waiters AS w
              WHERE w.lock_key = p_key AND w.expires_at > now()
              ORDER BY w.ticket LIMIT greatest(cap - held, 0)) AS w;
  ELSIF NOT xheld THEN
    PERFORM pg_notify('pgfence_lease_released', w.owner_token)
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
$migration$;

DROP FUNCTION pgfence_wake_channel(text);

DO $migration$
BEGIN
  -- pgfence_acquire_fifo as migration 000011 defines it.
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
  IF n > 0 THEN
    PERFORM %1$I.pgfence_refused_async();
    RETURN QUERY SELECT NULL::bigint, NULL::timestamptz, n;
    RETURN;
  END IF;
  RETURN QUERY
  INSERT INTO %1$I.lock_leases AS l (lock_key, owner, owner_token, fence, acquired_at, expires_at)
  VALUES (p_key, p_owner, p_token, %1$I.pgfence_draw_fence(), now(), now() + p_ttl_micros * interval '1 microsecond')
  ON CONFLICT ON CONSTRAINT lock_leases_pkey DO UPDATE
     SET owner       = EXCLUDED.owner,
         owner_token = EXCLUDED.owner_token,
         fence       = EXCLUDED.fence,
         acquired_at = EXCLUDED.acquired_at,
         expires_at  = EXCLUDED.expires_at
   WHERE l.expires_at <= now()
     AND l.fence < EXCLUDED.fence
  RETURNING l.fence, l.expires_at, 0;
  IF FOUND THEN
    DELETE FROM %1$I.pgfence_waiters AS w
     WHERE w.lock_key = p_key AND (w.owner_token = p_token OR w.expires_at <= now());
  ELSE
    PERFORM %1$I.pgfence_refused_async();
    RETURN QUERY SELECT NULL::bigint, NULL::timestamptz, 0;
  END IF;
END
$body$;
$f$, current_schema(), format('%I.pgfence_waiter_seq', current_schema()));

END
$migration$;

DROP TRIGGER pgfence_release_wakes_waiter ON lock_leases;
CREATE TRIGGER pgfence_release_wakes_waiter
  AFTER UPDATE ON lock_leases
  FOR EACH ROW
  WHEN (NEW.fence = OLD.fence AND NEW.expires_at < OLD.expires_at)
  EXECUTE FUNCTION pgfence_wake_on_lease_change();

ALTER TABLE lock_leases DROP COLUMN has_waiters;
