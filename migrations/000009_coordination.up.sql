-- Coordination beyond the mutex: semaphores (N permits per key), shared and
-- exclusive leases, and all-or-nothing key sets. Every grant carries its own
-- fence from pgfence_draw_fence(), the same source as a mutex lease's.
--
-- Objects are created unqualified, in the schema the migration runs in.
-- Function bodies name pgfence's objects qualified with that schema: they
-- are created through EXECUTE format(..., current_schema()), so that a body
-- never depends on the search_path of the session that calls it.
--
-- A key of a semaphore or of a shared/exclusive lease lives in its own
-- namespace: it does not conflict with a mutex lease (lock_leases) of the
-- same name. A key set takes mutex leases, in lock_leases.

-- One row per semaphore or shared/exclusive key: how many permits its
-- holders agreed on (0: a shared/exclusive key, any number of shared
-- holders). Every acquisition of the key locks this row first, so that
-- acquisitions of one key are judged one after another, each on the
-- committed state of the ones before it.
CREATE TABLE pgfence_semaphores (
  lock_key text    PRIMARY KEY,
  permits  integer NOT NULL
);

-- One row per permit slot (0..permits-1) of a semaphore, or per holder slot
-- of a shared/exclusive key. A slot is held while expires_at > now(); an
-- expired row is free for the next acquisition, which gives it a new fence.
CREATE TABLE pgfence_permits (
  lock_key    text        NOT NULL,
  slot        integer     NOT NULL,
  exclusive   boolean     NOT NULL,
  owner       text        NOT NULL,
  owner_token text        NOT NULL,
  fence       bigint      NOT NULL,
  acquired_at timestamptz NOT NULL,
  expires_at  timestamptz NOT NULL,
  PRIMARY KEY (lock_key, slot)
);

-- Exclusive waiters of a shared/exclusive key: while one waits (its row
-- unexpired), no new shared lease is granted, so a stream of shared
-- acquirers cannot starve a writer. A waiter refreshes its row on every
-- attempt and deletes it when it is granted or gives up; a waiter that dies
-- stops blocking readers when its row expires.
CREATE TABLE pgfence_exclusive_waiters (
  lock_key    text        NOT NULL,
  owner_token text        NOT NULL,
  expires_at  timestamptz NOT NULL,
  PRIMARY KEY (lock_key, owner_token)
);

-- The queue of fair (first come, first served) waiters for a mutex lease:
-- a waiter's ticket, drawn when it first asks, orders it among the key's
-- waiters. A waiter refreshes its place (expires_at) on every attempt and
-- deletes it when it is granted or gives up; a waiter that dies leaves the
-- queue when its place expires.
CREATE SEQUENCE pgfence_waiter_seq AS bigint;
CREATE TABLE pgfence_waiters (
  lock_key    text        NOT NULL,
  owner_token text        NOT NULL,
  owner       text        NOT NULL,            -- for humans and dashboards
  ticket      bigint      NOT NULL,
  expires_at  timestamptz NOT NULL,
  PRIMARY KEY (lock_key, owner_token)
);
CREATE INDEX pgfence_waiters_order ON pgfence_waiters (lock_key, ticket);

DO $migration$
BEGIN
  -- pgfence_acquire_fifo: one attempt of a fair waiter. It takes (or
  -- refreshes, for p_place_micros) the waiter's place in the key's queue,
  -- and only the first unexpired place may be granted the lease, as Acquire
  -- grants it (a durable commit, a fence drawn, an expired row replaced only
  -- with a higher fence). It returns one row: the fence and expiry when
  -- granted (the place is then removed, with any expired places of the
  -- key), else NULLs and the number of waiters ahead. Attempts on one key
  -- are judged one after another under a transaction-level advisory lock.
  EXECUTE format($f$
CREATE FUNCTION %1$I.pgfence_acquire_fifo(p_key text, p_owner text, p_token text, p_ttl_micros bigint, p_place_micros bigint)
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
    RETURN QUERY SELECT NULL::bigint, NULL::timestamptz, 0;
  END IF;
END
$body$;
$f$, current_schema(), format('%I.pgfence_waiter_seq', current_schema()));

  -- pgfence_lock_semaphore: takes the key's row lock and checks that the
  -- caller agrees on the number of permits. A caller that disagrees with the
  -- holders of unexpired permits gets SQLSTATE PF007; when nothing is held,
  -- the newcomer's number replaces the old one.
  EXECUTE format($f$
CREATE FUNCTION %1$I.pgfence_lock_semaphore(p_key text, p_permits integer) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $body$
DECLARE
  cur integer;
BEGIN
  INSERT INTO %1$I.pgfence_semaphores (lock_key, permits) VALUES (p_key, p_permits)
  ON CONFLICT (lock_key) DO NOTHING;
  SELECT s.permits INTO cur FROM %1$I.pgfence_semaphores AS s WHERE s.lock_key = p_key FOR UPDATE;
  IF cur = p_permits THEN
    RETURN;
  END IF;
  IF EXISTS (SELECT FROM %1$I.pgfence_permits AS p WHERE p.lock_key = p_key AND p.expires_at > now()) THEN
    RAISE EXCEPTION 'pgfence: key %% is held as %%; this caller asked for %%', quote_literal(p_key),
      CASE cur WHEN 0 THEN 'a shared/exclusive lease' ELSE format('a semaphore of %%s permits', cur) END,
      CASE p_permits WHEN 0 THEN 'a shared/exclusive lease' ELSE format('%%s permits', p_permits) END
      USING ERRCODE = 'PF007',
            DETAIL = format('held=%%s asked=%%s', cur, p_permits),
            HINT = 'Every caller of one key must use the same kind and number of permits. The number may change only while no permit is held.';
  END IF;
  UPDATE %1$I.pgfence_semaphores AS s SET permits = p_permits WHERE s.lock_key = p_key;
END
$body$;
$f$, current_schema());

  -- pgfence_acquire_permit: grants the lowest free permit slot of a
  -- semaphore of p_permits permits, with a new fence, or returns no row
  -- when all are held. One statement for the caller, one durable commit.
  EXECUTE format($f$
CREATE FUNCTION %1$I.pgfence_acquire_permit(p_key text, p_permits integer, p_owner text, p_token text, p_ttl_micros bigint)
RETURNS TABLE (slot integer, fence bigint, expires_at timestamptz)
LANGUAGE plpgsql VOLATILE
AS $body$
DECLARE
  free integer;
BEGIN
  IF p_permits IS NULL OR p_permits < 1 OR p_permits > 10000 THEN
    RAISE EXCEPTION 'pgfence: a semaphore needs 1 to 10000 permits, got %%', coalesce(p_permits::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  PERFORM %1$I.pgfence_commit_durably(), set_config('lock_timeout', '1s', true);
  PERFORM %1$I.pgfence_lock_semaphore(p_key, p_permits);
  -- After the key's lock, so that an acquisition that waited for the lock
  -- sees a tombstone committed meanwhile.
  IF EXISTS (SELECT FROM %1$I.pgfence_abandoned_tokens AS a WHERE a.owner_token = p_token) THEN
    RETURN;
  END IF;
  SELECT g INTO free
    FROM generate_series(0, p_permits - 1) AS g
   WHERE NOT EXISTS (SELECT FROM %1$I.pgfence_permits AS p
                      WHERE p.lock_key = p_key AND p.slot = g AND p.expires_at > now())
   ORDER BY g
   LIMIT 1;
  IF free IS NULL THEN
    RETURN;
  END IF;
  RETURN QUERY
  INSERT INTO %1$I.pgfence_permits AS p (lock_key, slot, exclusive, owner, owner_token, fence, acquired_at, expires_at)
  VALUES (p_key, free, false, p_owner, p_token, %1$I.pgfence_draw_fence(), now(), now() + p_ttl_micros * interval '1 microsecond')
  ON CONFLICT ON CONSTRAINT pgfence_permits_pkey DO UPDATE
     SET exclusive   = false,
         owner       = EXCLUDED.owner,
         owner_token = EXCLUDED.owner_token,
         fence       = EXCLUDED.fence,
         acquired_at = EXCLUDED.acquired_at,
         expires_at  = EXCLUDED.expires_at
   WHERE p.expires_at <= now()
     AND p.fence < EXCLUDED.fence
  RETURNING p.slot, p.fence, p.expires_at;
END
$body$;
$f$, current_schema());

  -- pgfence_acquire_shared: grants a shared (p_exclusive false) or the
  -- exclusive lease of a shared/exclusive key, or returns no row. An
  -- exclusive lease needs no unexpired holder of either kind; a shared one
  -- needs no unexpired exclusive holder and no exclusive waiter (writer
  -- preference). With p_wait_micros > 0, a refused exclusive request records
  -- (or refreshes) its place as a waiter for that long; a granted one
  -- removes it.
  EXECUTE format($f$
CREATE FUNCTION %1$I.pgfence_acquire_shared(p_key text, p_exclusive boolean, p_owner text, p_token text,
                                            p_ttl_micros bigint, p_wait_micros bigint DEFAULT 0)
RETURNS TABLE (slot integer, fence bigint, expires_at timestamptz)
LANGUAGE plpgsql VOLATILE
AS $body$
DECLARE
  free integer;
BEGIN
  IF p_exclusive IS NULL THEN
    RAISE EXCEPTION 'pgfence: say whether the lease is exclusive' USING ERRCODE = '22023';
  END IF;
  PERFORM %1$I.pgfence_commit_durably(), set_config('lock_timeout', '1s', true);
  PERFORM %1$I.pgfence_lock_semaphore(p_key, 0);
  IF EXISTS (SELECT FROM %1$I.pgfence_abandoned_tokens AS a WHERE a.owner_token = p_token) THEN
    RETURN;
  END IF;
  IF p_exclusive THEN
    IF EXISTS (SELECT FROM %1$I.pgfence_permits AS p WHERE p.lock_key = p_key AND p.expires_at > now()) THEN
      IF coalesce(p_wait_micros, 0) > 0 THEN
        INSERT INTO %1$I.pgfence_exclusive_waiters AS w (lock_key, owner_token, expires_at)
        VALUES (p_key, p_token, now() + p_wait_micros * interval '1 microsecond')
        ON CONFLICT (lock_key, owner_token) DO UPDATE SET expires_at = EXCLUDED.expires_at;
      END IF;
      RETURN;
    END IF;
    DELETE FROM %1$I.pgfence_exclusive_waiters AS w WHERE w.lock_key = p_key AND (w.owner_token = p_token OR w.expires_at <= now());
    free := 0;
  ELSE
    IF EXISTS (SELECT FROM %1$I.pgfence_permits AS p WHERE p.lock_key = p_key AND p.expires_at > now() AND p.exclusive)
       OR EXISTS (SELECT FROM %1$I.pgfence_exclusive_waiters AS w WHERE w.lock_key = p_key AND w.expires_at > now()) THEN
      RETURN;
    END IF;
    SELECT g INTO free
      FROM generate_series(0, (SELECT count(*)::integer FROM %1$I.pgfence_permits AS p WHERE p.lock_key = p_key)) AS g
     WHERE NOT EXISTS (SELECT FROM %1$I.pgfence_permits AS p
                        WHERE p.lock_key = p_key AND p.slot = g AND p.expires_at > now())
     ORDER BY g
     LIMIT 1;
  END IF;
  RETURN QUERY
  INSERT INTO %1$I.pgfence_permits AS p (lock_key, slot, exclusive, owner, owner_token, fence, acquired_at, expires_at)
  VALUES (p_key, free, p_exclusive, p_owner, p_token, %1$I.pgfence_draw_fence(), now(), now() + p_ttl_micros * interval '1 microsecond')
  ON CONFLICT ON CONSTRAINT pgfence_permits_pkey DO UPDATE
     SET exclusive   = EXCLUDED.exclusive,
         owner       = EXCLUDED.owner,
         owner_token = EXCLUDED.owner_token,
         fence       = EXCLUDED.fence,
         acquired_at = EXCLUDED.acquired_at,
         expires_at  = EXCLUDED.expires_at
   WHERE p.expires_at <= now()
     AND p.fence < EXCLUDED.fence
  RETURNING p.slot, p.fence, p.expires_at;
END
$body$;
$f$, current_schema());

  -- pgfence_leave_exclusive_queue: an exclusive waiter that gives up.
  EXECUTE format($f$
CREATE FUNCTION %1$I.pgfence_leave_exclusive_queue(p_key text, p_token text) RETURNS boolean
LANGUAGE sql VOLATILE
AS $body$
  WITH gone AS (
    DELETE FROM %1$I.pgfence_exclusive_waiters AS w WHERE w.lock_key = p_key AND w.owner_token = p_token RETURNING 1
  )
  SELECT EXISTS (SELECT FROM gone)
$body$;
$f$, current_schema());

  -- pgfence_abandon_permit: gives up an acquisition of a permit or a
  -- shared/exclusive lease whose answer was lost: tombstones the owner
  -- token, then, under the key's lock (so after any acquisition of the key
  -- in progress), releases what the token holds. It returns the released
  -- fence, or no row. An acquisition that takes the key's lock after this
  -- commits sees the tombstone and grants nothing.
  EXECUTE format($f$
CREATE FUNCTION %1$I.pgfence_abandon_permit(p_key text, p_token text) RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
AS $body$
BEGIN
  INSERT INTO %1$I.pgfence_abandoned_tokens (owner_token) VALUES (p_token) ON CONFLICT (owner_token) DO NOTHING;
  PERFORM FROM %1$I.pgfence_semaphores AS s WHERE s.lock_key = p_key FOR UPDATE;
  DELETE FROM %1$I.pgfence_exclusive_waiters AS w WHERE w.lock_key = p_key AND w.owner_token = p_token;
  RETURN QUERY
  UPDATE %1$I.pgfence_permits AS p SET expires_at = now()
   WHERE p.lock_key = p_key AND p.owner_token = p_token AND p.expires_at > now()
  RETURNING p.fence;
END
$body$;
$f$, current_schema());

  -- pgfence_acquire_set: takes the mutex leases of several keys at once, all
  -- or none. Rows are written in key order, so two sets that overlap wait
  -- for each other in one order and never deadlock (lock_timeout bounds each
  -- wait). When any key is held, it raises SQLSTATE PF008, naming the held
  -- keys, which rolls the whole statement back: no lease is left by a
  -- refused attempt. Each key gets its own fence; all carry p_token.
  EXECUTE format($f$
CREATE FUNCTION %1$I.pgfence_acquire_set(p_keys text[], p_owner text, p_token text, p_ttl_micros bigint)
RETURNS TABLE (lock_key text, fence bigint, expires_at timestamptz)
LANGUAGE plpgsql VOLATILE
AS $body$
DECLARE
  n  integer := coalesce(cardinality(p_keys), 0);
  ks text[];
  fs bigint[];
  es timestamptz[];
BEGIN
  IF n = 0 OR array_position(p_keys, NULL) IS NOT NULL
     OR (SELECT count(DISTINCT k) FROM unnest(p_keys) AS k) <> n THEN
    RAISE EXCEPTION 'pgfence: a key set needs distinct, non-null keys, got %%', coalesce(p_keys::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  PERFORM %1$I.pgfence_commit_durably(), set_config('lock_timeout', '1s', true);
  IF EXISTS (SELECT FROM %1$I.pgfence_abandoned_tokens AS a WHERE a.owner_token = p_token) THEN
    RETURN;
  END IF;
  WITH granted AS (
    INSERT INTO %1$I.lock_leases AS l (lock_key, owner, owner_token, fence, acquired_at, expires_at)
    SELECT k, p_owner, p_token, %1$I.pgfence_draw_fence(), now(), now() + p_ttl_micros * interval '1 microsecond'
      FROM unnest(p_keys) AS k
     ORDER BY k
    ON CONFLICT ON CONSTRAINT lock_leases_pkey DO UPDATE
       SET owner       = EXCLUDED.owner,
           owner_token = EXCLUDED.owner_token,
           fence       = EXCLUDED.fence,
           acquired_at = EXCLUDED.acquired_at,
           expires_at  = EXCLUDED.expires_at
     WHERE l.expires_at <= now()
       AND l.fence < EXCLUDED.fence
    RETURNING l.lock_key, l.fence, l.expires_at
  )
  SELECT array_agg(g.lock_key), array_agg(g.fence), array_agg(g.expires_at) INTO ks, fs, es FROM granted AS g;
  IF coalesce(cardinality(ks), 0) < n THEN
    RAISE EXCEPTION 'pgfence: key set not acquired: %% held by another owner',
      (SELECT string_agg(quote_literal(k), ', ' ORDER BY k) FROM unnest(p_keys) AS k WHERE k <> ALL (coalesce(ks, '{}')))
      USING ERRCODE = 'PF008',
            DETAIL = format('held=%%s', (SELECT array_agg(k ORDER BY k) FROM unnest(p_keys) AS k WHERE k <> ALL (coalesce(ks, '{}'))));
  END IF;
  RETURN QUERY SELECT * FROM unnest(ks, fs, es);
END
$body$;
$f$, current_schema());

  -- The SQL contract's forms, for clients in any language: an interval TTL,
  -- the owner token drawn here (244 random bits), and bad input refused with
  -- SQLSTATE PF005 before anything is written. Renew and release a permit
  -- (or a shared/exclusive lease) by key, slot and fence, as pglease does:
  -- renew never resurrects an expired grant, release never touches a newer
  -- holder's.
  EXECUTE format($f$
CREATE FUNCTION %1$I.pgfence_check_slot_call(fn text, key text, ttl interval, owner text) RETURNS boolean
LANGUAGE plpgsql STABLE
AS $body$
BEGIN
  IF key IS NULL OR key = '' OR octet_length(key) > 512 THEN
    RAISE EXCEPTION '%%: the key must be 1 to 512 bytes, got %%', fn, coalesce(octet_length(key)::text || ' bytes', 'NULL')
      USING ERRCODE = 'PF005';
  END IF;
  IF ttl IS NULL OR ttl < interval '10 milliseconds' OR ttl > interval '24 hours' THEN
    RAISE EXCEPTION '%%: the TTL %% is outside [10 ms, 24 h]', fn, coalesce(ttl::text, 'NULL') USING ERRCODE = 'PF005';
  END IF;
  IF owner IS NULL OR owner = '' OR octet_length(owner) > 256 THEN
    RAISE EXCEPTION '%%: the owner label must be 1 to 256 bytes', fn USING ERRCODE = 'PF005';
  END IF;
  RETURN true;
END
$body$;
$f$, current_schema());

  EXECUTE format($f$
CREATE FUNCTION %1$I.pgfence_acquire_permit(key text, permits integer, ttl interval, owner text)
RETURNS TABLE (slot integer, fence bigint, expires_at timestamptz)
LANGUAGE sql VOLATILE
AS $fn$
  SELECT r.slot, r.fence, r.expires_at
    FROM %1$I.pgfence_acquire_permit($1, $2, $4, replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''),
                                     (extract(epoch FROM $3) * 1000000)::bigint) AS r
   WHERE %1$I.pgfence_check_slot_call('pgfence_acquire_permit', $1, $3, $4)
$fn$;
$f$, current_schema());

  EXECUTE format($f$
CREATE FUNCTION %1$I.pgfence_acquire_shared(key text, exclusive boolean, ttl interval, owner text)
RETURNS TABLE (slot integer, fence bigint, expires_at timestamptz)
LANGUAGE sql VOLATILE
AS $fn$
  SELECT r.slot, r.fence, r.expires_at
    FROM %1$I.pgfence_acquire_shared($1, $2, $4, replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''),
                                     (extract(epoch FROM $3) * 1000000)::bigint, 0) AS r
   WHERE %1$I.pgfence_check_slot_call('pgfence_acquire_shared', $1, $3, $4)
$fn$;
$f$, current_schema());

  EXECUTE format($f$
CREATE FUNCTION %1$I.pgfence_renew_permit(key text, slot integer, fence bigint, ttl interval)
RETURNS TABLE (expires_at timestamptz)
LANGUAGE sql VOLATILE
AS $fn$
  UPDATE %1$I.pgfence_permits AS p
     SET expires_at = now() + (extract(epoch FROM $4) * 1000000)::bigint * interval '1 microsecond'
   WHERE %1$I.pgfence_check_slot_call('pgfence_renew_permit', $1, $4, 'x')
     AND p.lock_key = $1 AND p.slot = $2 AND p.fence = $3
     AND p.expires_at > now()
     AND %1$I.pgfence_commit_durably()
  RETURNING p.expires_at
$fn$;
$f$, current_schema());

  EXECUTE format($f$
CREATE FUNCTION %1$I.pgfence_release_permit(key text, slot integer, fence bigint)
RETURNS TABLE (released boolean)
LANGUAGE sql VOLATILE
AS $fn$
  UPDATE %1$I.pgfence_permits AS p
     SET expires_at = now()
   WHERE p.lock_key = $1 AND p.slot = $2 AND p.fence = $3
     AND p.expires_at > now()
     AND set_config('synchronous_commit', 'off', true) = 'off'
  RETURNING true
$fn$;
$f$, current_schema());
END
$migration$;
