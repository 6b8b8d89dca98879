-- Back to the v0.1.0 schema: semaphores and shared/exclusive keys in
-- tables of their own, apart from plain leases, and their functions as they
-- were. Unexpired holders are kept: an exclusive holder stays in lock_leases
-- (as a plain lease), every shared holder and permit moves back to its
-- table, one slot down. Places in the queues move back to their tables;
-- exclusive places of fair waiters of shared keys go to the plain leases'
-- queue, where they may wait for their key's shared holders.

DROP TRIGGER pgfence_release_wakes_waiters ON lock_leases;
DROP TRIGGER pgfence_leaving_wakes_waiters ON pgfence_waiters;
DROP FUNCTION pgfence_wake_on_change();
DROP FUNCTION pgfence_wake_waiters(text);
DROP FUNCTION pgfence_acquire(text, interval, text);
DROP FUNCTION pgfence_acquire_shared(text, boolean, interval, text);
DROP FUNCTION pgfence_acquire_permit(text, integer, interval, text);
DROP FUNCTION pgfence_acquire_set(text[], interval, text);
DROP FUNCTION pgfence_acquire_set(text[], text, text, bigint);
DROP FUNCTION pgfence_renew(text, bigint, interval);
DROP FUNCTION pgfence_release(text, bigint, interval);
DROP FUNCTION pgfence_acquire_kind(text, text, integer, text, text, bigint, bigint, boolean);
DROP FUNCTION pgfence_grant(text, text, integer, text, text, bigint, boolean, lock_leases);
DROP FUNCTION pgfence_lock_key(text);
DROP FUNCTION pgfence_take_place(text, text, integer, text, text, boolean, bigint);
DROP FUNCTION pgfence_refuse(text);
DROP FUNCTION pgfence_summarise(text);
DROP FUNCTION pgfence_renew_slot(text, bigint, bigint);
DROP FUNCTION pgfence_release_slot(text, bigint, bigint, boolean, boolean);
DROP FUNCTION pgfence_abandon_slot(text, text);
DROP FUNCTION pgfence_kind_name(text, integer);
DROP FUNCTION pgfence_token();
DROP FUNCTION pgfence_micros(interval);

CREATE TABLE pgfence_semaphores (
  lock_key text    PRIMARY KEY,
  permits  integer NOT NULL
);
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
CREATE TABLE pgfence_exclusive_waiters (
  lock_key    text        NOT NULL,
  owner_token text        NOT NULL,
  expires_at  timestamptz NOT NULL,
  PRIMARY KEY (lock_key, owner_token)
);
CREATE TABLE pgfence_permit_waiters (
  lock_key    text        NOT NULL,
  owner_token text        NOT NULL,
  owner       text        NOT NULL,
  exclusive   boolean     NOT NULL,
  ticket      bigint      NOT NULL,
  expires_at  timestamptz NOT NULL,
  PRIMARY KEY (lock_key, owner_token)
);
CREATE INDEX pgfence_permit_waiters_order ON pgfence_permit_waiters (lock_key, ticket);

INSERT INTO pgfence_semaphores (lock_key, permits)
SELECT DISTINCT ON (k.lock_key) k.lock_key, k.permits
  FROM (SELECT l.lock_key, l.permits FROM lock_leases AS l WHERE l.slot > 0
        UNION ALL
        SELECT w.lock_key, w.permits FROM pgfence_waiters AS w WHERE w.queued AND w.kind <> 'exclusive') AS k
 ORDER BY k.lock_key;

INSERT INTO pgfence_permits (lock_key, slot, exclusive, owner, owner_token, fence, acquired_at, expires_at)
SELECT l.lock_key, l.slot - 1, false, l.owner, l.owner_token, l.fence, l.acquired_at, l.expires_at
  FROM lock_leases AS l
 WHERE l.slot > 0 AND l.expires_at > now();

INSERT INTO pgfence_permit_waiters (lock_key, owner_token, owner, exclusive, ticket, expires_at)
SELECT w.lock_key, w.owner_token, w.owner, false, w.ticket, w.expires_at
  FROM pgfence_waiters AS w
 WHERE w.queued AND w.kind <> 'exclusive';

INSERT INTO pgfence_exclusive_waiters (lock_key, owner_token, expires_at)
SELECT w.lock_key, w.owner_token, w.expires_at
  FROM pgfence_waiters AS w
 WHERE NOT w.queued;

DELETE FROM pgfence_waiters AS w WHERE NOT w.queued OR w.kind <> 'exclusive';
DELETE FROM lock_leases AS l WHERE l.slot > 0 OR l.kind <> 'exclusive';

ALTER TABLE pgfence_waiters DROP COLUMN kind, DROP COLUMN permits, DROP COLUMN queued;
ALTER TABLE lock_leases DROP CONSTRAINT lock_leases_pkey;
ALTER TABLE lock_leases DROP COLUMN slot, DROP COLUMN kind, DROP COLUMN permits;
ALTER TABLE lock_leases ADD CONSTRAINT lock_leases_pkey PRIMARY KEY (lock_key);

-- The functions of the v0.1.0 schema, as its migrations created them.
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
  IF fn IN ('pgfence_acquire', 'pgfence_renew') AND (ttl IS NULL OR ttl < interval '10 milliseconds' OR ttl > interval '24 hours') THEN
    RAISE EXCEPTION '%: the TTL % is outside [10 ms, 24 h]', fn, coalesce(ttl::text, 'NULL')
      USING ERRCODE = 'PF005',
            HINT = 'A TTL must outlive a round trip to the server and be short enough that a crashed holder does not block the key for long; renew a shorter lease instead of taking a long one.';
  END IF;
  IF fn = 'pgfence_acquire' AND (owner IS NULL OR owner = '' OR octet_length(owner) > 256) THEN
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

DO $do$
BEGIN
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
CREATE FUNCTION pgfence_acquire(key text, ttl interval, owner text)
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
CREATE FUNCTION pgfence_renew(key text, fence bigint, ttl interval)
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
CREATE FUNCTION pgfence_release(key text, fence bigint)
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
  WHEN (NEW.has_waiters AND NEW.fence = OLD.fence AND NEW.expires_at < OLD.expires_at)
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

