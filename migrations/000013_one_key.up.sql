-- One key, one lock: every kind of lease of a key lives in lock_leases, and
-- every waiter of a key in pgfence_waiters, so that kinds that exclude each
-- other can never hold one key at once, whoever asks and how.
--
-- The rows of a key in lock_leases:
--
--   slot 0, the key's row: the exclusive holder (a plain lease is the
--     exclusive kind: kind 'exclusive'), or, while the key is held by shared
--     holders or permits, their summary (kind 'shared' or 'permit', owner
--     and owner_token empty): its expires_at is at least every holder's, and
--     its fence is the highest fence granted on the key. So an exclusive
--     acquisition, the single upsert of the key's row that the plain lease
--     has always been, is refused while any holder of any kind is unexpired,
--     and never writes a fence below one granted on the key.
--   slots 1 and up: one shared holder or permit each, with its own fence.
--     Every change to these rows (grant, renew, release, give-back) locks the
--     key's row first and keeps the summary exact, in plpgsql functions whose
--     statements each see what the ones before committed.
--
-- Grants of a kind other than the fast exclusive upsert, and every attempt of
-- a fair waiter, run one after another per key under a transaction-level
-- advisory lock (the key's queue lock).
--
-- The rules for a key that is held: an exclusive request is refused (it
-- waits, when it waits); a request of the kind the key is held in is granted
-- while the kind allows (shared: no exclusive waiter; permits: a free one,
-- and the same number of permits); a shared request on a key held as
-- permits, a permit request on a key held shared, or a permit request with
-- another number of permits, is refused with SQLSTATE PF007, which names the
-- kind the key is held in: those kinds cannot share a key, and neither is the
-- exclusive one that waits for the other.
--
-- Function bodies are plain SQL and PL/pgSQL; each function's search_path is
-- pinned to pgfence's schema at the end of this file, so that a body finds
-- pgfence's objects, and only them, whatever the caller's search_path.

-- A v0.1.0 schema kept semaphores and shared/exclusive keys apart from plain
-- leases; a key held both ways at once cannot become one lock without
-- dropping a holder.
DO $$
DECLARE
  both_ways text;
BEGIN
  SELECT string_agg(quote_literal(l.lock_key), ', ' ORDER BY l.lock_key) INTO both_ways
    FROM lock_leases AS l
   WHERE l.expires_at > now()
     AND EXISTS (SELECT FROM pgfence_permits AS p WHERE p.lock_key = l.lock_key AND p.expires_at > now());
  IF both_ways IS NOT NULL THEN
    RAISE EXCEPTION 'pgfence: keys % are held both as plain leases and as semaphores or shared/exclusive leases', both_ways
      USING ERRCODE = '55000',
            HINT = 'From this version a key is one lock whatever its kind. Wait until those leases are released or expire (at most their TTL), then migrate again.';
  END IF;
END
$$;

-- v0.1.0's wake-up triggers go first: nothing below is a release.
DROP TRIGGER pgfence_release_wakes_waiter ON lock_leases;
DROP TRIGGER pgfence_leaving_wakes_waiter ON pgfence_waiters;

-- The holders.
ALTER TABLE lock_leases
  ADD COLUMN slot    integer NOT NULL DEFAULT 0,  -- 0: the key's row; 1 and up: a shared holder or permit
  ADD COLUMN kind    text    NOT NULL DEFAULT 'exclusive',  -- 'exclusive', 'shared' or 'permit'
  ADD COLUMN permits integer NOT NULL DEFAULT 0;  -- the number of permits of a permit key, else 0
ALTER TABLE lock_leases DROP CONSTRAINT lock_leases_pkey;
ALTER TABLE lock_leases ADD CONSTRAINT lock_leases_pkey PRIMARY KEY (lock_key, slot);

-- v0.1.0's holders of semaphores and shared/exclusive keys, with their
-- fences, tokens and expiries. The exclusive lease of a shared/exclusive key
-- (always its slot 0) becomes the key's row; every other holder moves one
-- slot up, and its key's row summarises it.
INSERT INTO lock_leases AS l (lock_key, slot, kind, permits, owner, owner_token, fence, acquired_at, expires_at)
SELECT p.lock_key, p.slot + 1, CASE WHEN s.permits > 0 THEN 'permit' ELSE 'shared' END, s.permits,
       p.owner, p.owner_token, p.fence, p.acquired_at, p.expires_at
  FROM pgfence_permits AS p
  JOIN pgfence_semaphores AS s USING (lock_key)
 WHERE p.expires_at > now() AND NOT p.exclusive;

INSERT INTO lock_leases AS l (lock_key, slot, kind, permits, owner, owner_token, fence, acquired_at, expires_at)
SELECT p.lock_key, 0, 'exclusive', 0, p.owner, p.owner_token, p.fence, p.acquired_at, p.expires_at
  FROM pgfence_permits AS p
 WHERE p.expires_at > now() AND p.exclusive
ON CONFLICT (lock_key, slot) DO UPDATE
   SET kind = 'exclusive', permits = 0, owner = EXCLUDED.owner, owner_token = EXCLUDED.owner_token,
       fence = GREATEST(l.fence, EXCLUDED.fence), acquired_at = EXCLUDED.acquired_at,
       expires_at = EXCLUDED.expires_at, released_at = NULL;

INSERT INTO lock_leases AS l (lock_key, slot, kind, permits, owner, owner_token, fence, acquired_at, expires_at)
SELECT h.lock_key, 0, min(h.kind), min(h.permits), '', '', max(h.fence), min(h.acquired_at), max(h.expires_at)
  FROM lock_leases AS h
 WHERE h.slot > 0
 GROUP BY h.lock_key
ON CONFLICT (lock_key, slot) DO UPDATE
   SET kind = EXCLUDED.kind, permits = EXCLUDED.permits, owner = '', owner_token = '',
       fence = GREATEST(l.fence, EXCLUDED.fence), acquired_at = EXCLUDED.acquired_at,
       expires_at = EXCLUDED.expires_at, released_at = NULL;

-- The waiters: one queue per key, every kind in it.
--   queued true:  a fair waiter; its ticket orders it among the key's.
--   queued false: an exclusive waiter that does not queue (a plain
--                 Acquire refused while shared holders or permits hold the
--                 key): it takes no turn, but while its place is unexpired
--                 no new shared lease or permit is granted (writer
--                 preference).
ALTER TABLE pgfence_waiters
  ADD COLUMN kind    text    NOT NULL DEFAULT 'exclusive',
  ADD COLUMN permits integer NOT NULL DEFAULT 0,
  ADD COLUMN queued  boolean NOT NULL DEFAULT true;

INSERT INTO pgfence_waiters (lock_key, owner_token, owner, kind, permits, queued, ticket, expires_at)
SELECT w.lock_key, w.owner_token, w.owner,
       CASE WHEN s.permits > 0 THEN 'permit' WHEN w.exclusive THEN 'exclusive' ELSE 'shared' END,
       s.permits, true, w.ticket, w.expires_at
  FROM pgfence_permit_waiters AS w
  JOIN pgfence_semaphores AS s USING (lock_key)
 WHERE w.expires_at > now()
ON CONFLICT ON CONSTRAINT pgfence_waiters_pkey DO NOTHING;

INSERT INTO pgfence_waiters (lock_key, owner_token, owner, kind, permits, queued, ticket, expires_at)
SELECT x.lock_key, x.owner_token, '', 'exclusive', 0, false, nextval('pgfence_waiter_seq'), x.expires_at
  FROM pgfence_exclusive_waiters AS x
 WHERE x.expires_at > now()
ON CONFLICT ON CONSTRAINT pgfence_waiters_pkey DO NOTHING;

-- v0.1.0's functions of the separate kinds, and their tables.
DROP INDEX pgfence_permit_waiters_order;
DROP TABLE pgfence_permit_waiters;
DROP TABLE pgfence_exclusive_waiters;
DROP TABLE pgfence_permits;
DROP TABLE pgfence_semaphores;
DROP FUNCTION IF EXISTS pgfence_acquire_fifo(text, text, text, bigint, bigint);
DROP FUNCTION IF EXISTS pgfence_acquire_permit_fifo(text, integer, text, text, bigint, bigint);
DROP FUNCTION IF EXISTS pgfence_acquire_shared_fifo(text, boolean, text, text, bigint, bigint);
DROP FUNCTION IF EXISTS pgfence_acquire_permit(text, integer, text, text, bigint);
DROP FUNCTION IF EXISTS pgfence_acquire_permit(text, integer, interval, text);
DROP FUNCTION IF EXISTS pgfence_acquire_shared(text, boolean, text, text, bigint, bigint);
DROP FUNCTION IF EXISTS pgfence_acquire_shared(text, boolean, interval, text);
DROP FUNCTION IF EXISTS pgfence_renew_permit(text, integer, bigint, interval);
DROP FUNCTION IF EXISTS pgfence_release_permit(text, integer, bigint);
DROP FUNCTION IF EXISTS pgfence_release(text, bigint);
DROP FUNCTION IF EXISTS pgfence_acquire(text, interval, text);
DROP FUNCTION IF EXISTS pgfence_renew(text, bigint, interval);
DROP FUNCTION IF EXISTS pgfence_acquire_set(text[], text, text, bigint);
DROP FUNCTION IF EXISTS pgfence_abandon_permit(text, text);
DROP FUNCTION IF EXISTS pgfence_leave_exclusive_queue(text, text);
DROP FUNCTION IF EXISTS pgfence_grant_slot(text, integer, boolean, text, text, bigint);
DROP FUNCTION IF EXISTS pgfence_take_permit_place(text, text, text, boolean, bigint);
DROP FUNCTION IF EXISTS pgfence_lock_semaphore(text, integer);
DROP FUNCTION IF EXISTS pgfence_check_slot_call(text, text, interval, text);
DROP FUNCTION IF EXISTS pgfence_wake_on_lease_change();
DROP FUNCTION IF EXISTS pgfence_wake_on_permit_change();
DROP FUNCTION IF EXISTS pgfence_wake_lease_waiter(text);
DROP FUNCTION IF EXISTS pgfence_wake_permit_waiters(text);
DROP FUNCTION IF EXISTS pgfence_refused_async();

-- pgfence_kind_name: a kind as an error message names it.
CREATE FUNCTION pgfence_kind_name(p_kind text, p_permits integer) RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
  SELECT CASE p_kind WHEN 'exclusive' THEN 'an exclusive lease'
                     WHEN 'shared' THEN 'shared leases'
                     ELSE format('a semaphore of %s permits', p_permits) END
$$;

-- pgfence_lock_key: takes key's queue lock, then creates the key's row if
-- it has none (expired, fence 0) and locks it; returns the row. Every change
-- to a key's shared holders or permits takes the row lock first, so the
-- statements that follow see the key as the last of them left it.
CREATE FUNCTION pgfence_lock_key(p_key text) RETURNS lock_leases
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  h lock_leases;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended('pgfence_waiters:' || p_key, 0));
  INSERT INTO lock_leases (lock_key, slot, kind, owner, owner_token, fence, acquired_at, expires_at)
  VALUES (p_key, 0, 'exclusive', '', '', 0, now(), now())
  ON CONFLICT (lock_key, slot) DO NOTHING;
  SELECT * INTO h FROM lock_leases AS l WHERE l.lock_key = p_key AND l.slot = 0 FOR UPDATE;
  RETURN h;
END
$$;

-- pgfence_grant: the grant rules of every kind, written once. Under the
-- key's locks (pgfence_lock_key, taken by the caller), it grants key in
-- p_kind for p_ttl_micros and returns the grant's slot, fence and expiry, or
-- no row when the key's holders exclude it now. A shared lease or a permit
-- is also refused while an exclusive waiter waits (writer preference), unless
-- p_queue_ok says the queue's rules were applied already. PF007 when the
-- key is held in a kind that cannot share it with p_kind.
CREATE FUNCTION pgfence_grant(p_key text, p_kind text, p_permits integer, p_owner text, p_token text,
                              p_ttl_micros bigint, p_queue_ok boolean, h lock_leases)
RETURNS TABLE (slot integer, fence bigint, expires_at timestamptz)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  live boolean := h.expires_at > now();
  held integer := 0;
  free integer;
  g    record;
BEGIN
  IF live AND (h.kind = 'exclusive' OR p_kind = 'exclusive') THEN
    RETURN;
  END IF;
  IF live AND (h.kind <> p_kind OR h.permits <> p_permits) THEN
    RAISE EXCEPTION 'pgfence: key % is held as %; this caller asked for %', quote_literal(p_key),
      pgfence_kind_name(h.kind, h.permits), pgfence_kind_name(p_kind, p_permits)
      USING ERRCODE = 'PF007',
            DETAIL = format('held=%s/%s asked=%s/%s', h.kind, h.permits, p_kind, p_permits),
            HINT = 'A key is one lock: every caller of a key that is held shared or as a semaphore must ask for the same kind and number of permits; an exclusive (plain) lease waits for them all.';
  END IF;
  IF p_kind = 'exclusive' THEN
    -- The plain lease's upsert, which also judges a key's row it did not
    -- lock before (pgfence_acquire_kind locks it only for the other kinds).
    RETURN QUERY
    INSERT INTO lock_leases AS l (lock_key, owner, owner_token, fence, acquired_at, expires_at, has_waiters)
    VALUES (p_key, p_owner, p_token, pgfence_draw_fence(), now(), now() + p_ttl_micros * interval '1 microsecond',
            EXISTS (SELECT FROM pgfence_waiters AS w
                     WHERE w.lock_key = p_key AND w.queued AND w.owner_token <> p_token AND w.expires_at > now()))
    ON CONFLICT ON CONSTRAINT lock_leases_pkey DO UPDATE
       SET kind = 'exclusive', permits = 0, owner = EXCLUDED.owner, owner_token = EXCLUDED.owner_token,
           fence = EXCLUDED.fence, acquired_at = EXCLUDED.acquired_at, expires_at = EXCLUDED.expires_at,
           has_waiters = EXCLUDED.has_waiters
     WHERE l.expires_at <= now()
       AND l.fence < EXCLUDED.fence
    RETURNING l.slot, l.fence, l.expires_at;
    RETURN;
  END IF;
  IF p_kind <> 'exclusive' AND NOT p_queue_ok
     AND EXISTS (SELECT FROM pgfence_waiters AS w
                  WHERE w.lock_key = p_key AND w.kind = 'exclusive' AND w.owner_token <> p_token AND w.expires_at > now()) THEN
    RETURN;
  END IF;
  IF live THEN
    SELECT count(*) INTO held FROM lock_leases AS l WHERE l.lock_key = p_key AND l.slot > 0 AND l.expires_at > now();
  END IF;
  IF p_kind = 'permit' AND held >= p_permits THEN
    RETURN;
  END IF;
  SELECT min(s) INTO free
    FROM generate_series(1, held + 1) AS s
   WHERE NOT EXISTS (SELECT FROM lock_leases AS l WHERE l.lock_key = p_key AND l.slot = s AND l.expires_at > now());
  INSERT INTO lock_leases AS l (lock_key, slot, kind, permits, owner, owner_token, fence, acquired_at, expires_at)
  VALUES (p_key, free, p_kind, p_permits, p_owner, p_token, pgfence_draw_fence(), now(),
          now() + p_ttl_micros * interval '1 microsecond')
  ON CONFLICT ON CONSTRAINT lock_leases_pkey DO UPDATE
     SET kind = EXCLUDED.kind, permits = EXCLUDED.permits, owner = EXCLUDED.owner,
         owner_token = EXCLUDED.owner_token, fence = EXCLUDED.fence,
         acquired_at = EXCLUDED.acquired_at, expires_at = EXCLUDED.expires_at, released_at = NULL
   WHERE l.expires_at <= now()
  RETURNING l.slot, l.fence, l.expires_at INTO g;
  UPDATE lock_leases AS l
     SET kind = p_kind, permits = p_permits, owner = '', owner_token = '', fence = g.fence,
         acquired_at = CASE WHEN live THEN l.acquired_at ELSE now() END,
         expires_at = GREATEST(CASE WHEN live THEN l.expires_at ELSE now() END, g.expires_at),
         has_waiters = EXISTS (SELECT FROM pgfence_waiters AS w
                                WHERE w.lock_key = p_key AND w.queued AND w.owner_token <> p_token AND w.expires_at > now())
   WHERE l.lock_key = p_key AND l.slot = 0;
  RETURN QUERY SELECT g.slot, g.fence, g.expires_at;
END
$$;

-- pgfence_take_place: takes (or refreshes, for p_place_micros) a waiter's
-- place in key's queue and returns its ticket. The functions behind every
-- acquisition are PL/pgSQL, whose statements' plans a session keeps: a
-- LANGUAGE sql function that is not inlined is planned again at each call.
CREATE FUNCTION pgfence_take_place(p_key text, p_kind text, p_permits integer, p_owner text, p_token text,
                                   p_queued boolean, p_place_micros bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  t bigint;
BEGIN
  INSERT INTO pgfence_waiters AS w (lock_key, owner_token, owner, kind, permits, queued, ticket, expires_at)
  VALUES (p_key, p_token, p_owner, p_kind, p_permits, p_queued, nextval('pgfence_waiter_seq'),
          now() + p_place_micros * interval '1 microsecond')
  ON CONFLICT ON CONSTRAINT pgfence_waiters_pkey DO UPDATE
     SET expires_at = EXCLUDED.expires_at, queued = w.queued OR EXCLUDED.queued
  RETURNING w.ticket INTO t;
  RETURN t;
END
$$;

-- pgfence_acquire_kind: one attempt to take key in p_kind (with p_permits
-- permits for 'permit'), the one acquisition path of every kind but the plain
-- lease's single upsert. It returns one row: slot, fence and expiry when
-- granted, else NULLs and the number of waiters ahead (NULL too: the owner
-- token was abandoned).
--   p_queued false: a grant as the key's holders allow now. With
--     p_place_micros > 0, a refused exclusive request while shared holders
--     or permits hold the key keeps (or refreshes) a place that keeps new
--     shared leases and permits out for that long.
--   p_queued true: a fair waiter's attempt: it takes (or refreshes) its place
--     in the key's queue and is granted only in queue order: an exclusive
--     waiter first in the queue; a shared waiter with only shared waiters
--     ahead (consecutive shared waiters are granted together); a permit
--     waiter with only permit waiters ahead, fewer than permits are free.
-- A grant removes the waiter's place and the key's expired places. Every
-- grant commits durably; a refused attempt commits asynchronously (it wrote
-- only a place, which a crash may lose at no cost but the waiter's turn).
CREATE FUNCTION pgfence_acquire_kind(p_key text, p_kind text, p_permits integer, p_owner text, p_token text,
                                     p_ttl_micros bigint, p_place_micros bigint, p_queued boolean)
RETURNS TABLE (slot integer, fence bigint, expires_at timestamptz, ahead integer)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  h     lock_leases;
  mine  bigint;
  n     integer := 0;
  apart integer := 0;  -- waiters ahead of another kind, which a shared waiter or permit waiter never passes
  g     record;
BEGIN
  IF p_kind IS NULL OR p_kind NOT IN ('exclusive', 'shared', 'permit') THEN
    RAISE EXCEPTION 'pgfence: the kind must be exclusive, shared or permit, got %', coalesce(quote_literal(p_kind), 'NULL')
      USING ERRCODE = '22023';
  END IF;
  IF p_kind = 'permit' AND (p_permits IS NULL OR p_permits < 1 OR p_permits > 10000) THEN
    RAISE EXCEPTION 'pgfence: a semaphore needs 1 to 10000 permits, got %', coalesce(p_permits::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  IF p_kind <> 'permit' THEN
    p_permits := 0;
  END IF;
  PERFORM pgfence_commit_durably(), set_config('lock_timeout', '1s', true);
  IF p_kind = 'exclusive' THEN
    -- Its grant is the upsert that judges the newest row itself; only the
    -- queue's order needs the key's queue lock.
    PERFORM pg_advisory_xact_lock(hashtextextended('pgfence_waiters:' || p_key, 0));
    SELECT * INTO h FROM lock_leases AS l WHERE l.lock_key = p_key AND l.slot = 0;
  ELSE
    h := pgfence_lock_key(p_key);
  END IF;
  -- After the key's locks, so that an attempt that waited for them sees a
  -- tombstone committed meanwhile.
  IF EXISTS (SELECT FROM pgfence_abandoned_tokens AS a WHERE a.owner_token = p_token) THEN
    RETURN QUERY SELECT NULL::integer, NULL::bigint, NULL::timestamptz, NULL::integer;
    RETURN;
  END IF;
  IF p_queued THEN
    mine := pgfence_take_place(p_key, p_kind, p_permits, p_owner, p_token, true, p_place_micros);
    SELECT count(*), count(*) FILTER (WHERE w.kind <> p_kind)
      INTO n, apart
      FROM pgfence_waiters AS w
     WHERE w.lock_key = p_key AND w.queued AND w.ticket < mine AND w.expires_at > now();
    IF (p_kind = 'exclusive' AND n > 0)
       OR (p_kind = 'shared' AND (apart > 0
           OR EXISTS (SELECT FROM pgfence_waiters AS w
                       WHERE w.lock_key = p_key AND NOT w.queued AND w.kind = 'exclusive' AND w.expires_at > now())))
       OR (p_kind = 'permit' AND apart > 0)
       OR (p_kind = 'permit' AND n >= p_permits - (SELECT count(*) FROM lock_leases AS l
                                                  WHERE l.lock_key = p_key AND l.slot > 0 AND l.expires_at > now()
                                                    AND h.expires_at > now())) THEN
      PERFORM pgfence_refuse(p_key);
      RETURN QUERY SELECT NULL::integer, NULL::bigint, NULL::timestamptz, n;
      RETURN;
    END IF;
  END IF;
  SELECT * INTO g FROM pgfence_grant(p_key, p_kind, p_permits, p_owner, p_token, p_ttl_micros, p_queued, h) AS r;
  IF g.fence IS NULL THEN
    IF NOT p_queued AND p_kind = 'exclusive' AND p_place_micros > 0 AND h.kind <> 'exclusive' AND h.expires_at > now() THEN
      PERFORM pgfence_take_place(p_key, 'exclusive', 0, p_owner, p_token, false, p_place_micros);
    END IF;
    IF p_queued THEN
      PERFORM pgfence_refuse(p_key);
    ELSE
      PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    RETURN QUERY SELECT NULL::integer, NULL::bigint, NULL::timestamptz, n;
    RETURN;
  END IF;
  DELETE FROM pgfence_waiters AS w
   WHERE w.lock_key = p_key AND (w.owner_token = p_token OR w.expires_at <= now());
  RETURN QUERY SELECT g.slot, g.fence, g.expires_at, 0;
END
$$;

-- pgfence_refuse: a fair waiter was refused: its key's row says the key has
-- waiters (so that a release wakes them), and the attempt commits
-- asynchronously.
CREATE FUNCTION pgfence_refuse(p_key text) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
  UPDATE lock_leases AS l SET has_waiters = true WHERE l.lock_key = p_key AND l.slot = 0 AND NOT l.has_waiters;
  PERFORM set_config('synchronous_commit', 'off', true);
END
$$;

-- pgfence_summarise: under the key's row lock, sets the key's row of a key
-- held shared or as permits to expire with its last holder (now, when none
-- is left).
CREATE FUNCTION pgfence_summarise(p_key text) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
  UPDATE lock_leases AS l
     SET expires_at = GREATEST(now(), (SELECT max(x.expires_at) FROM lock_leases AS x
                                        WHERE x.lock_key = p_key AND x.slot > 0 AND x.expires_at > now()))
   WHERE l.lock_key = p_key AND l.slot = 0 AND l.kind <> 'exclusive' AND l.expires_at > now();
END
$$;

-- pgfence_renew_slot: extends a shared holder's or permit's grant, matched
-- on key and fence, only while it is unexpired (never resurrects one); its
-- key's row expires no earlier. It commits durably.
CREATE FUNCTION pgfence_renew_slot(p_key text, p_fence bigint, p_ttl_micros bigint)
RETURNS TABLE (expires_at timestamptz)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  e timestamptz;
BEGIN
  PERFORM pgfence_commit_durably();
  PERFORM FROM lock_leases AS l WHERE l.lock_key = p_key AND l.slot = 0 FOR UPDATE;
  UPDATE lock_leases AS l SET expires_at = now() + p_ttl_micros * interval '1 microsecond'
   WHERE l.lock_key = p_key AND l.slot > 0 AND l.fence = p_fence AND l.expires_at > now()
  RETURNING l.expires_at INTO e;
  IF e IS NULL THEN
    RETURN;
  END IF;
  UPDATE lock_leases AS l SET expires_at = GREATEST(l.expires_at, e)
   WHERE l.lock_key = p_key AND l.slot = 0;
  RETURN QUERY SELECT e;
END
$$;

-- pgfence_release_slot: gives a shared holder's or permit's grant back,
-- matched on key and fence, so that a newer holder's is never touched; with
-- a minimum hold it stays held until its grant time plus p_hold_micros, if
-- that is later. True when it released the grant, no row when it was not
-- held any more. Asynchronous commit unless p_durable, as a plain release.
-- With p_notify, the key is sent as NOTIFY pgfence_lease_released's payload
-- for waiters that do not queue (the queue's are woken by the trigger).
CREATE FUNCTION pgfence_release_slot(p_key text, p_fence bigint, p_hold_micros bigint, p_durable boolean, p_notify boolean)
RETURNS TABLE (released boolean)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
  IF p_durable THEN
    PERFORM pgfence_commit_durably();
  ELSE
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;
  PERFORM FROM lock_leases AS l WHERE l.lock_key = p_key AND l.slot = 0 FOR UPDATE;
  UPDATE lock_leases AS l
     SET expires_at = GREATEST(now(), l.acquired_at + coalesce(p_hold_micros, 0) * interval '1 microsecond'),
         released_at = now()
   WHERE l.lock_key = p_key AND l.slot > 0 AND l.fence = p_fence AND l.expires_at > now();
  IF NOT FOUND THEN
    RETURN;
  END IF;
  PERFORM pgfence_summarise(p_key);
  IF p_notify THEN
    PERFORM pg_notify('pgfence_lease_released', p_key);
  END IF;
  RETURN QUERY SELECT true;
END
$$;

-- pgfence_abandon_slot: gives up an acquisition through pgfence_acquire_kind
-- whose answer was lost: tombstones the owner token, then, under the key's
-- locks (so after any attempt of the key in progress), removes its place and
-- releases what the token holds, in any slot. It returns the released fence,
-- or no row. An attempt that takes the key's locks after this commits sees
-- the tombstone and grants nothing.
CREATE FUNCTION pgfence_abandon_slot(p_key text, p_token text) RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  f bigint;
BEGIN
  INSERT INTO pgfence_abandoned_tokens (owner_token) VALUES (p_token) ON CONFLICT (owner_token) DO NOTHING;
  PERFORM pgfence_lock_key(p_key);
  DELETE FROM pgfence_waiters AS w WHERE w.lock_key = p_key AND w.owner_token = p_token;
  UPDATE lock_leases AS l SET expires_at = now(), released_at = now()
   WHERE l.lock_key = p_key AND l.owner_token = p_token AND l.expires_at > now()
  RETURNING l.fence INTO f;
  IF f IS NULL THEN
    RETURN;
  END IF;
  PERFORM pgfence_summarise(p_key);
  RETURN NEXT f;
END
$$;

-- pgfence_acquire_set: takes several keys exclusively, all or none. Rows are
-- written in key order, so two sets that overlap wait for each other in one
-- order and never deadlock (lock_timeout bounds each wait). When any key is
-- held, in any kind, it raises SQLSTATE PF008 naming the held keys, which
-- rolls the whole statement back: no lease is left by a refused attempt.
-- Each key gets its own fence; all carry p_token.
CREATE FUNCTION pgfence_acquire_set(p_keys text[], p_owner text, p_token text, p_ttl_micros bigint)
RETURNS TABLE (lock_key text, fence bigint, expires_at timestamptz)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  n  integer := coalesce(cardinality(p_keys), 0);
  ks text[];
  fs bigint[];
  es timestamptz[];
BEGIN
  IF n = 0 OR array_position(p_keys, NULL) IS NOT NULL
     OR (SELECT count(DISTINCT k) FROM unnest(p_keys) AS k) <> n THEN
    RAISE EXCEPTION 'pgfence: a key set needs distinct, non-null keys, got %', coalesce(p_keys::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
  PERFORM pgfence_commit_durably(), set_config('lock_timeout', '1s', true);
  IF EXISTS (SELECT FROM pgfence_abandoned_tokens AS a WHERE a.owner_token = p_token) THEN
    RETURN;
  END IF;
  WITH granted AS (
    INSERT INTO lock_leases AS l (lock_key, owner, owner_token, fence, acquired_at, expires_at)
    SELECT k, p_owner, p_token, pgfence_draw_fence(), now(), now() + p_ttl_micros * interval '1 microsecond'
      FROM unnest(p_keys) AS k
     ORDER BY k
    ON CONFLICT ON CONSTRAINT lock_leases_pkey DO UPDATE
       SET kind        = 'exclusive',
           permits     = 0,
           owner       = EXCLUDED.owner,
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
    RAISE EXCEPTION 'pgfence: key set not acquired: % held by another owner',
      (SELECT string_agg(quote_literal(k), ', ' ORDER BY k) FROM unnest(p_keys) AS k WHERE k <> ALL (coalesce(ks, '{}')))
      USING ERRCODE = 'PF008',
            DETAIL = format('held=%s', (SELECT array_agg(k ORDER BY k) FROM unnest(p_keys) AS k WHERE k <> ALL (coalesce(ks, '{}'))));
  END IF;
  RETURN QUERY SELECT * FROM unnest(ks, fs, es);
END
$$;

-- The wake-ups: when a key's holders change so that waiters of its queue may
-- be granted, the database wakes those (NOTIFY on each one's channel,
-- pgfence_wake_channel, with its owner token as the payload, delivered at
-- commit), whoever released: the first waiters in queue order that the
-- rules would grant now.
CREATE FUNCTION pgfence_wake_waiters(p_key text) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  h    lock_leases;
  cur  text;
  held integer := 0;
  w    record;
BEGIN
  IF NOT EXISTS (SELECT FROM pgfence_waiters AS x WHERE x.lock_key = p_key AND x.queued AND x.expires_at > now()) THEN
    RETURN;
  END IF;
  SELECT * INTO h FROM lock_leases AS l WHERE l.lock_key = p_key AND l.slot = 0;
  IF FOUND AND h.expires_at > now() THEN
    IF h.kind = 'exclusive' THEN
      RETURN;
    END IF;
    cur := h.kind;
    SELECT count(*) INTO held FROM lock_leases AS l WHERE l.lock_key = p_key AND l.slot > 0 AND l.expires_at > now();
  END IF;
  FOR w IN SELECT x.owner_token, x.kind, x.permits FROM pgfence_waiters AS x
            WHERE x.lock_key = p_key AND x.queued AND x.expires_at > now()
            ORDER BY x.ticket LIMIT 1000 LOOP
    IF w.kind = 'exclusive' THEN
      IF cur IS NULL THEN
        PERFORM pg_notify(pgfence_wake_channel(w.owner_token), w.owner_token);
      END IF;
      RETURN;
    END IF;
    IF (cur IS NOT NULL AND cur <> w.kind) OR (w.kind = 'permit' AND held >= w.permits) THEN
      RETURN;
    END IF;
    PERFORM pg_notify(pgfence_wake_channel(w.owner_token), w.owner_token);
    cur := w.kind;
    held := held + 1;
  END LOOP;
END
$$;

CREATE FUNCTION pgfence_wake_on_change() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    PERFORM pgfence_wake_waiters(OLD.lock_key);
  ELSE
    PERFORM pgfence_wake_waiters(NEW.lock_key);
  END IF;
  RETURN NULL;
END
$$;

-- The one wake-up trigger of the holders: a release or give-back (the
-- expiry moves earlier, the fence stays) of a key that has fair waiters, or
-- of a shared holder or permit. A constraint trigger deferred to commit, so
-- that it judges the key as the whole transaction left it (a release of a
-- shared holder changes its row and the key's). Its WHEN condition is
-- checked without calling the function, so renewals, grants and releases of
-- keys nobody waits for pay nothing for it. A waiter leaving the queue
-- (given up, or granted) wakes the next ones too.
CREATE CONSTRAINT TRIGGER pgfence_release_wakes_waiters
  AFTER UPDATE ON lock_leases
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW
  WHEN ((NEW.has_waiters OR NEW.slot > 0) AND NEW.fence = OLD.fence AND NEW.expires_at < OLD.expires_at)
  EXECUTE FUNCTION pgfence_wake_on_change();

CREATE CONSTRAINT TRIGGER pgfence_leaving_wakes_waiters
  AFTER DELETE ON pgfence_waiters
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW
  EXECUTE FUNCTION pgfence_wake_on_change();

-- The SQL contract, for clients in any language: an interval TTL, the owner
-- token drawn here (244 random bits), bad input refused with SQLSTATE PF005
-- before anything is written, a call in an old transaction refused with
-- PF006 (pgfence_check_lease_call). Every kind:
--
--   pgfence_acquire(key, ttl, owner)                    the plain (exclusive) lease
--   pgfence_acquire_shared(key, exclusive, ttl, owner)  a shared lease, or exclusive
--   pgfence_acquire_permit(key, permits, ttl, owner)    a permit of a semaphore
--   pgfence_acquire_set(keys, ttl, owner)               several keys exclusively, all or none
--   pgfence_renew(key, fence, ttl)                      any grant, by its fence
--   pgfence_release(key, fence [, hold])                any grant, by its fence
--
-- Acquisitions return no row when the key's holders exclude the caller now.
-- A slot is the grant's among its key's, from 0 (as pglease's Lease.Slot):
-- a permit's names one of N resources; an exclusive lease's is 0.

-- pgfence_check_lease_call, as in the baseline, knows the contract's new
-- functions. (A schema some other way brought to the baseline's version may
-- lack it: it is created then.)
CREATE OR REPLACE FUNCTION pgfence_check_lease_call(fn text, key text, ttl interval, owner text, fence bigint) RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
  IF statement_timestamp() - transaction_timestamp() > interval '1 second' THEN
    RAISE EXCEPTION '%: called in a transaction that began % before this statement', fn, statement_timestamp() - transaction_timestamp()
      USING ERRCODE = 'PF006',
            HINT = 'Call it on its own, in autocommit (psql: no BEGIN; psycopg: autocommit=True): expiry is judged by now(), the start time of the transaction, which is past.';
  END IF;
  IF key IS NULL OR key = '' THEN
    RAISE EXCEPTION '%: the key is empty', fn USING ERRCODE = 'PF005';
  END IF;
  IF octet_length(key) > 512 THEN
    RAISE EXCEPTION '%: the key is % bytes, at most 512', fn, octet_length(key) USING ERRCODE = 'PF005';
  END IF;
  IF fn IN ('pgfence_acquire', 'pgfence_renew', 'pgfence_acquire_shared', 'pgfence_acquire_permit', 'pgfence_acquire_set')
     AND (ttl IS NULL OR ttl < interval '10 milliseconds' OR ttl > interval '24 hours') THEN
    RAISE EXCEPTION '%: the TTL % is outside [10 ms, 24 h]', fn, coalesce(ttl::text, 'NULL')
      USING ERRCODE = 'PF005',
            HINT = 'A TTL must outlive a round trip to the server and be short enough that a crashed holder does not block the key for long; renew a shorter lease instead of taking a long one.';
  END IF;
  IF fn IN ('pgfence_acquire', 'pgfence_acquire_shared', 'pgfence_acquire_permit', 'pgfence_acquire_set')
     AND (owner IS NULL OR owner = '' OR octet_length(owner) > 256) THEN
    RAISE EXCEPTION '%: the owner label must be 1 to 256 bytes, got %', fn, coalesce(octet_length(owner)::text || ' bytes', 'NULL')
      USING ERRCODE = 'PF005';
  END IF;
  IF fn IN ('pgfence_renew', 'pgfence_release') AND (fence IS NULL OR fence <= 0) THEN
    RAISE EXCEPTION '%: the fence must be positive, got %', fn, coalesce(fence::text, 'NULL')
      USING ERRCODE = 'PF005';
  END IF;
  RETURN true;
END
$$;

-- pgfence_token: a new owner token, 244 random bits.
CREATE FUNCTION pgfence_token() RETURNS text
LANGUAGE sql VOLATILE
AS $$
  SELECT replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', '')
$$;

CREATE FUNCTION pgfence_micros(ttl interval) RETURNS bigint
LANGUAGE sql IMMUTABLE
AS $$
  SELECT (extract(epoch FROM ttl) * 1000000)::bigint
$$;

-- The plain lease: the statement pglease runs (queries/leases.sql Acquire).
CREATE FUNCTION pgfence_acquire(key text, ttl interval, owner text)
RETURNS TABLE (fence bigint, expires_at timestamptz)
LANGUAGE sql VOLATILE
AS $$
  INSERT INTO lock_leases AS l (lock_key, owner, owner_token, fence, acquired_at, expires_at)
  SELECT $1, $3, pgfence_token(), pgfence_draw_fence(), now(),
         now() + pgfence_micros($2) * interval '1 microsecond'
   WHERE pgfence_check_lease_call('pgfence_acquire', $1, $2, $3, NULL)
     AND pgfence_commit_durably()
     AND set_config('lock_timeout', '1s', true) IS NOT NULL
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
  RETURNING l.fence, l.expires_at
$$;

CREATE FUNCTION pgfence_acquire_shared(key text, exclusive boolean, ttl interval, owner text)
RETURNS TABLE (slot integer, fence bigint, expires_at timestamptz)
LANGUAGE sql VOLATILE
AS $$
  SELECT GREATEST(r.slot - 1, 0), r.fence, r.expires_at
    FROM pgfence_acquire_kind($1, CASE WHEN $2 THEN 'exclusive' ELSE 'shared' END, 0, $4, pgfence_token(),
                              pgfence_micros($3), 0, false) AS r
   WHERE pgfence_check_lease_call('pgfence_acquire_shared', $1, $3, $4, NULL)
     AND $2 IS NOT NULL
     AND r.fence IS NOT NULL
$$;

CREATE FUNCTION pgfence_acquire_permit(key text, permits integer, ttl interval, owner text)
RETURNS TABLE (slot integer, fence bigint, expires_at timestamptz)
LANGUAGE sql VOLATILE
AS $$
  SELECT r.slot - 1, r.fence, r.expires_at
    FROM pgfence_acquire_kind($1, 'permit', $2, $4, pgfence_token(), pgfence_micros($3), 0, false) AS r
   WHERE pgfence_check_lease_call('pgfence_acquire_permit', $1, $3, $4, NULL)
     AND r.fence IS NOT NULL
$$;

CREATE FUNCTION pgfence_acquire_set(keys text[], ttl interval, owner text)
RETURNS TABLE (lock_key text, fence bigint, expires_at timestamptz)
LANGUAGE sql VOLATILE
AS $$
  SELECT r.lock_key, r.fence, r.expires_at
    FROM pgfence_acquire_set($1, $3, pgfence_token(), pgfence_micros($2)) AS r
   WHERE pgfence_check_lease_call('pgfence_acquire_set', coalesce($1[1], ''), $2, $3, NULL)
     AND (SELECT bool_and(pgfence_check_lease_call('pgfence_acquire_set', k, $2, $3, NULL)) FROM unnest($1) AS k)
$$;

-- Renew: extends the grant only while it is unexpired and still carries
-- this fence, so it never resurrects an expired one; no row means it is
-- lost. It commits durably.
CREATE FUNCTION pgfence_renew(key text, fence bigint, ttl interval)
RETURNS TABLE (expires_at timestamptz)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  e timestamptz;
BEGIN
  PERFORM pgfence_check_lease_call('pgfence_renew', key, ttl, NULL, fence);
  UPDATE lock_leases AS l
     SET expires_at = now() + pgfence_micros(ttl) * interval '1 microsecond'
   WHERE l.lock_key = key AND l.slot = 0 AND l.kind = 'exclusive'
     AND l.fence = pgfence_renew.fence AND l.expires_at > now()
     AND pgfence_commit_durably()
  RETURNING l.expires_at INTO e;
  IF e IS NOT NULL THEN
    RETURN QUERY SELECT e;
    RETURN;
  END IF;
  RETURN QUERY SELECT r.expires_at FROM pgfence_renew_slot(key, fence, pgfence_micros(ttl)) AS r;
END
$$;

-- Release: gives the grant back, matched on key and fence, so a newer
-- holder's is never touched; with hold, the key stays held until the grant
-- time plus hold, if that is later (a minimum hold). One row when it released
-- the caller's grant, no row when it was not held any more. It commits
-- asynchronously: a release lost in a crash only makes the lease run to its
-- TTL, and the next durable commit on the server flushes it anyway.
CREATE FUNCTION pgfence_release(key text, fence bigint, hold interval DEFAULT interval '0')
RETURNS TABLE (released boolean)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
  PERFORM pgfence_check_lease_call('pgfence_release', key, NULL, NULL, fence);
  IF hold IS NULL OR hold < interval '0' OR hold > interval '24 hours' THEN
    RAISE EXCEPTION 'pgfence_release: the minimum hold % is outside [0, 24 h]', coalesce(hold::text, 'NULL')
      USING ERRCODE = 'PF005';
  END IF;
  PERFORM set_config('synchronous_commit', 'off', true);
  UPDATE lock_leases AS l
     SET expires_at = GREATEST(now(), l.acquired_at + hold), released_at = now()
   WHERE l.lock_key = key AND l.slot = 0 AND l.kind = 'exclusive'
     AND l.fence = pgfence_release.fence AND l.expires_at > now();
  IF FOUND THEN
    RETURN QUERY SELECT true;
    RETURN;
  END IF;
  RETURN QUERY SELECT r.released FROM pgfence_release_slot(key, fence, pgfence_micros(hold), false, false) AS r;
END
$$;

-- Pin the search_path of every function above to pgfence's schema (then
-- pg_temp, searched last, so that no temporary object can stand in for one
-- of pgfence's). The functions of earlier migrations name their objects
-- qualified instead: the planner inlines no function with a SET clause, and
-- those are inlined into the statements that call them.
DO $$
DECLARE
  f regprocedure;
BEGIN
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc AS p
            WHERE p.pronamespace = (SELECT n.oid FROM pg_namespace AS n WHERE n.nspname = current_schema())
              AND p.proname IN ('pgfence_kind_name', 'pgfence_lock_key', 'pgfence_grant', 'pgfence_take_place',
                                'pgfence_acquire_kind', 'pgfence_refuse', 'pgfence_summarise', 'pgfence_renew_slot',
                                'pgfence_release_slot', 'pgfence_abandon_slot', 'pgfence_acquire_set',
                                'pgfence_wake_waiters', 'pgfence_wake_on_change', 'pgfence_token', 'pgfence_micros',
                                'pgfence_acquire', 'pgfence_acquire_shared', 'pgfence_acquire_permit',
                                'pgfence_renew', 'pgfence_release', 'pgfence_check_lease_call') LOOP
    EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', f, current_schema());
  END LOOP;
END
$$;
