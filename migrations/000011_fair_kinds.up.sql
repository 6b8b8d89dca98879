-- Fair (first come, first served) waiting for semaphores and shared/exclusive
-- keys, and a wake-up of the first waiters that the database sends itself,
-- whoever releases.
--
-- Objects are created unqualified, in the schema the migration runs in;
-- function bodies name pgfence's objects qualified with that schema (through
-- EXECUTE format(..., current_schema())), so that a body, a trigger's too,
-- never depends on the search_path of the session that runs it.

-- The queue of fair waiters of a semaphore or shared/exclusive key, as
-- pgfence_waiters is a mutex lease's: a ticket from pgfence_waiter_seq,
-- drawn on the first attempt, orders a waiter among the key's; a waiter
-- refreshes its place on every attempt and deletes it when it is granted or
-- gives up; a dead waiter leaves the queue when its place expires.
CREATE TABLE pgfence_permit_waiters (
  lock_key    text        NOT NULL,
  owner_token text        NOT NULL,
  owner       text        NOT NULL,            -- for humans and dashboards
  exclusive   boolean     NOT NULL,            -- an exclusive waiter of a shared/exclusive key
  ticket      bigint      NOT NULL,
  expires_at  timestamptz NOT NULL,
  PRIMARY KEY (lock_key, owner_token)
);
CREATE INDEX pgfence_permit_waiters_order ON pgfence_permit_waiters (lock_key, ticket);

DO $migration$
BEGIN
  -- pgfence_refused_async: a fair waiter's refused attempt commits
  -- asynchronously: it wrote only the waiter's place (and drew no fence that
  -- any row keeps), which a crash may lose at no cost but the waiter's turn,
  -- and a durable commit there made the next waiter's grant, which waits for
  -- the key's lock, wait for this one's WAL flush too. set_config(..., true)
  -- lasts until the end of the calling transaction.
  EXECUTE format($f$
CREATE FUNCTION %1$I.pgfence_refused_async() RETURNS void
LANGUAGE sql VOLATILE
AS $body$
  SELECT FROM set_config('synchronous_commit', 'off', true)
$body$;
$f$, current_schema());

  -- pgfence_acquire_fifo as migration 000009 defines it, but a refused
  -- attempt commits asynchronously (pgfence_refused_async).
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

  -- pgfence_wake_lease_waiter: when key's mutex lease is free, sends NOTIFY
  -- pgfence_lease_released with the owner token of the key's first fair
  -- waiter as the payload (delivered when the calling transaction commits):
  -- one waiter is woken, not every one. PL/pgSQL, so that its plans are
  -- cached per session: it runs on every release, and most releases find
  -- no waiter, which it checks first.
  EXECUTE format($f$
CREATE FUNCTION %1$I.pgfence_wake_lease_waiter(p_key text) RETURNS void
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
CREATE FUNCTION %1$I.pgfence_wake_permit_waiters(p_key text) RETURNS void
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

  -- The wake-ups, as triggers: a release (or a give-back: the expiry moves
  -- earlier, the fence stays) wakes the first waiters, and so does a waiter
  -- leaving the queue (given up, or granted: a semaphore grant that leaves
  -- permits free wakes the next). Their WHEN conditions are checked without
  -- calling the function, so renewals and grants pay nothing for them.
  EXECUTE format($f$
CREATE FUNCTION %1$I.pgfence_wake_on_lease_change() RETURNS trigger
LANGUAGE plpgsql
AS $body$
BEGIN
  IF TG_OP = 'DELETE' THEN
    PERFORM %1$I.pgfence_wake_lease_waiter(OLD.lock_key);
  ELSE
    PERFORM %1$I.pgfence_wake_lease_waiter(NEW.lock_key);
  END IF;
  RETURN NULL;
END
$body$;
$f$, current_schema());

  EXECUTE format($f$
CREATE FUNCTION %1$I.pgfence_wake_on_permit_change() RETURNS trigger
LANGUAGE plpgsql
AS $body$
BEGIN
  IF TG_OP = 'DELETE' THEN
    PERFORM %1$I.pgfence_wake_permit_waiters(OLD.lock_key);
  ELSE
    PERFORM %1$I.pgfence_wake_permit_waiters(NEW.lock_key);
  END IF;
  RETURN NULL;
END
$body$;
$f$, current_schema());

  -- pgfence_grant_slot: writes a grant of slot p_slot of key (a new fence
  -- from pgfence_draw_fence), replacing only an expired row with a lower
  -- fence, as pgfence_acquire_permit and pgfence_acquire_shared grant.
  EXECUTE format($f$
CREATE FUNCTION %1$I.pgfence_grant_slot(p_key text, p_slot integer, p_exclusive boolean, p_owner text, p_token text, p_ttl_micros bigint)
RETURNS TABLE (slot integer, fence bigint, expires_at timestamptz)
LANGUAGE sql VOLATILE
AS $body$
  INSERT INTO %1$I.pgfence_permits AS p (lock_key, slot, exclusive, owner, owner_token, fence, acquired_at, expires_at)
  VALUES (p_key, p_slot, p_exclusive, p_owner, p_token, %1$I.pgfence_draw_fence(), now(), now() + p_ttl_micros * interval '1 microsecond')
  ON CONFLICT ON CONSTRAINT pgfence_permits_pkey DO UPDATE
     SET exclusive   = EXCLUDED.exclusive,
         owner       = EXCLUDED.owner,
         owner_token = EXCLUDED.owner_token,
         fence       = EXCLUDED.fence,
         acquired_at = EXCLUDED.acquired_at,
         expires_at  = EXCLUDED.expires_at
   WHERE p.expires_at <= now()
     AND p.fence < EXCLUDED.fence
  RETURNING p.slot, p.fence, p.expires_at
$body$;
$f$, current_schema());

  -- pgfence_take_permit_place: takes (or refreshes, for p_place_micros) a
  -- waiter's place in key's queue; returns its ticket.
  EXECUTE format($f$
CREATE FUNCTION %1$I.pgfence_take_permit_place(p_key text, p_owner text, p_token text, p_exclusive boolean, p_place_micros bigint)
RETURNS bigint
LANGUAGE sql VOLATILE
AS $body$
  INSERT INTO %1$I.pgfence_permit_waiters AS w (lock_key, owner_token, owner, exclusive, ticket, expires_at)
  VALUES (p_key, p_token, p_owner, p_exclusive, nextval(%2$L), now() + p_place_micros * interval '1 microsecond')
  ON CONFLICT ON CONSTRAINT pgfence_permit_waiters_pkey DO UPDATE SET expires_at = EXCLUDED.expires_at
  RETURNING w.ticket
$body$;
$f$, current_schema(), format('%I.pgfence_waiter_seq', current_schema()));

  -- pgfence_acquire_permit_fifo: one attempt of a fair waiter for a permit
  -- of a semaphore of p_permits permits. Under the key's row lock it takes
  -- (or refreshes) the waiter's place; the waiter is granted a permit, as
  -- pgfence_acquire_permit grants it, only when fewer waiters are ahead of
  -- it than permits are free. It returns one row: slot, fence and expiry
  -- when granted (the place is then removed, with the key's expired
  -- places), else NULLs and the number of waiters ahead (NULL too: the owner
  -- token was abandoned).
  EXECUTE format($f$
CREATE FUNCTION %1$I.pgfence_acquire_permit_fifo(p_key text, p_permits integer, p_owner text, p_token text,
                                                 p_ttl_micros bigint, p_place_micros bigint)
RETURNS TABLE (slot integer, fence bigint, expires_at timestamptz, ahead integer)
LANGUAGE plpgsql VOLATILE
AS $body$
DECLARE
  mine bigint;
  n    integer;
  held integer;
BEGIN
  IF p_permits IS NULL OR p_permits < 1 OR p_permits > 10000 THEN
    RAISE EXCEPTION 'pgfence: a semaphore needs 1 to 10000 permits, got %%', coalesce(p_permits::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  PERFORM %1$I.pgfence_commit_durably(), set_config('lock_timeout', '1s', true);
  PERFORM %1$I.pgfence_lock_semaphore(p_key, p_permits);
  IF EXISTS (SELECT FROM %1$I.pgfence_abandoned_tokens AS a WHERE a.owner_token = p_token) THEN
    RETURN QUERY SELECT NULL::integer, NULL::bigint, NULL::timestamptz, NULL::integer;
    RETURN;
  END IF;
  mine := %1$I.pgfence_take_permit_place(p_key, p_owner, p_token, false, p_place_micros);
  SELECT count(*) INTO n FROM %1$I.pgfence_permit_waiters AS w
   WHERE w.lock_key = p_key AND w.ticket < mine AND w.expires_at > now();
  SELECT count(*) INTO held FROM %1$I.pgfence_permits AS p WHERE p.lock_key = p_key AND p.expires_at > now();
  IF n >= p_permits - held THEN
    PERFORM %1$I.pgfence_refused_async();
    RETURN QUERY SELECT NULL::integer, NULL::bigint, NULL::timestamptz, n;
    RETURN;
  END IF;
  RETURN QUERY SELECT r.slot, r.fence, r.expires_at, 0
                 FROM %1$I.pgfence_acquire_permit(p_key, p_permits, p_owner, p_token, p_ttl_micros) AS r;
  IF FOUND THEN
    DELETE FROM %1$I.pgfence_permit_waiters AS w
     WHERE w.lock_key = p_key AND (w.owner_token = p_token OR w.expires_at <= now());
  ELSE
    PERFORM %1$I.pgfence_refused_async();
    RETURN QUERY SELECT NULL::integer, NULL::bigint, NULL::timestamptz, n;
  END IF;
END
$body$;
$f$, current_schema());

  -- pgfence_acquire_shared_fifo: one attempt of a fair waiter for a shared
  -- (p_exclusive false) or the exclusive lease of a shared/exclusive key,
  -- under the key's row lock. An exclusive waiter is granted only first in
  -- the queue and with nothing held; while it is first and refused, it also
  -- holds a place among the exclusive waiters (pgfence_exclusive_waiters),
  -- which keeps out shared acquirers that do not queue. A shared waiter is
  -- granted when no exclusive waiter is ahead of it, no exclusive waiter
  -- outside the queue waits, and no exclusive lease is held: consecutive
  -- shared waiters are granted together. It returns what
  -- pgfence_acquire_permit_fifo returns.
  EXECUTE format($f$
CREATE FUNCTION %1$I.pgfence_acquire_shared_fifo(p_key text, p_exclusive boolean, p_owner text, p_token text,
                                                 p_ttl_micros bigint, p_place_micros bigint)
RETURNS TABLE (slot integer, fence bigint, expires_at timestamptz, ahead integer)
LANGUAGE plpgsql VOLATILE
AS $body$
DECLARE
  mine bigint;
  n    integer;
  free integer;
BEGIN
  IF p_exclusive IS NULL THEN
    RAISE EXCEPTION 'pgfence: say whether the lease is exclusive' USING ERRCODE = '22023';
  END IF;
  PERFORM %1$I.pgfence_commit_durably(), set_config('lock_timeout', '1s', true);
  PERFORM %1$I.pgfence_lock_semaphore(p_key, 0);
  IF EXISTS (SELECT FROM %1$I.pgfence_abandoned_tokens AS a WHERE a.owner_token = p_token) THEN
    RETURN QUERY SELECT NULL::integer, NULL::bigint, NULL::timestamptz, NULL::integer;
    RETURN;
  END IF;
  mine := %1$I.pgfence_take_permit_place(p_key, p_owner, p_token, p_exclusive, p_place_micros);
  IF p_exclusive THEN
    SELECT count(*) INTO n FROM %1$I.pgfence_permit_waiters AS w
     WHERE w.lock_key = p_key AND w.ticket < mine AND w.expires_at > now();
    IF n > 0 THEN
      PERFORM %1$I.pgfence_refused_async();
      RETURN QUERY SELECT NULL::integer, NULL::bigint, NULL::timestamptz, n;
      RETURN;
    END IF;
    IF EXISTS (SELECT FROM %1$I.pgfence_permits AS p WHERE p.lock_key = p_key AND p.expires_at > now()) THEN
      INSERT INTO %1$I.pgfence_exclusive_waiters AS x (lock_key, owner_token, expires_at)
      VALUES (p_key, p_token, now() + p_place_micros * interval '1 microsecond')
      ON CONFLICT (lock_key, owner_token) DO UPDATE SET expires_at = EXCLUDED.expires_at;
      PERFORM %1$I.pgfence_refused_async();
      RETURN QUERY SELECT NULL::integer, NULL::bigint, NULL::timestamptz, 0;
      RETURN;
    END IF;
    free := 0;
  ELSE
    SELECT count(*) INTO n FROM %1$I.pgfence_permit_waiters AS w
     WHERE w.lock_key = p_key AND w.ticket < mine AND w.expires_at > now() AND w.exclusive;
    n := n + (SELECT count(*) FROM %1$I.pgfence_exclusive_waiters AS x
               WHERE x.lock_key = p_key AND x.expires_at > now()
                 AND NOT EXISTS (SELECT FROM %1$I.pgfence_permit_waiters AS w
                                  WHERE w.lock_key = p_key AND w.owner_token = x.owner_token));
    IF n > 0 OR EXISTS (SELECT FROM %1$I.pgfence_permits AS p
                         WHERE p.lock_key = p_key AND p.expires_at > now() AND p.exclusive) THEN
      PERFORM %1$I.pgfence_refused_async();
      RETURN QUERY SELECT NULL::integer, NULL::bigint, NULL::timestamptz, n;
      RETURN;
    END IF;
    SELECT g INTO free
      FROM generate_series(0, (SELECT count(*)::integer FROM %1$I.pgfence_permits AS p WHERE p.lock_key = p_key)) AS g
     WHERE NOT EXISTS (SELECT FROM %1$I.pgfence_permits AS p
                        WHERE p.lock_key = p_key AND p.slot = g AND p.expires_at > now())
     ORDER BY g
     LIMIT 1;
  END IF;
  RETURN QUERY SELECT r.slot, r.fence, r.expires_at, 0
                 FROM %1$I.pgfence_grant_slot(p_key, free, p_exclusive, p_owner, p_token, p_ttl_micros) AS r;
  IF FOUND THEN
    DELETE FROM %1$I.pgfence_exclusive_waiters AS x
     WHERE x.lock_key = p_key AND (x.owner_token = p_token OR x.expires_at <= now());
    DELETE FROM %1$I.pgfence_permit_waiters AS w
     WHERE w.lock_key = p_key AND (w.owner_token = p_token OR w.expires_at <= now());
  ELSE
    PERFORM %1$I.pgfence_refused_async();
    RETURN QUERY SELECT NULL::integer, NULL::bigint, NULL::timestamptz, 0;
  END IF;
END
$body$;
$f$, current_schema());
END
$migration$;

CREATE TRIGGER pgfence_release_wakes_waiter
  AFTER UPDATE ON lock_leases
  FOR EACH ROW
  WHEN (NEW.fence = OLD.fence AND NEW.expires_at < OLD.expires_at)
  EXECUTE FUNCTION pgfence_wake_on_lease_change();

CREATE TRIGGER pgfence_leaving_wakes_waiter
  AFTER DELETE ON pgfence_waiters
  FOR EACH ROW
  EXECUTE FUNCTION pgfence_wake_on_lease_change();

CREATE TRIGGER pgfence_release_wakes_waiters
  AFTER UPDATE ON pgfence_permits
  FOR EACH ROW
  WHEN (NEW.fence = OLD.fence AND NEW.expires_at < OLD.expires_at)
  EXECUTE FUNCTION pgfence_wake_on_permit_change();

CREATE TRIGGER pgfence_leaving_wakes_waiters
  AFTER DELETE ON pgfence_permit_waiters
  FOR EACH ROW
  EXECUTE FUNCTION pgfence_wake_on_permit_change();
