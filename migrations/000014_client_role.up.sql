-- The client role: services connect as roles of their own, members of
-- pgfence_client (GRANT pgfence_client TO app), and reach pgfence's state
-- only through functions.
--
-- A role that may write lock_leases could steal any lease (expires_at in the
-- past), pin a key forever (expires_at 'infinity') or break a holder's renew
-- and release (another fence). So pgfence_client gets no INSERT, UPDATE,
-- DELETE or TRUNCATE on pgfence's own tables (lock_leases, pgfence_waiters,
-- pgfence_abandoned_tokens): every write goes through a SECURITY DEFINER
-- function owned by the schema's owner, with its search_path pinned to this
-- schema (then pg_temp), that checks its arguments and runs one of the
-- statements pglease always ran. It may read the columns operator tools
-- read, never owner_token: the owner token settles an ambiguous acquisition
-- and must stay with its holder. On the fence sequence it has USAGE
-- (nextval, as pgfence_next_fence draws inside a claim's statement, and the
-- last value, which pgfence_set_fence checks a fence against), never UPDATE:
-- setval is refused. The ready-made tables pgfence_jobs and payout_intents
-- hold the service's own data: it has SELECT, INSERT, UPDATE and DELETE on
-- them.
--
-- Every function that writes is PL/pgSQL, whose statements' plans a session
-- keeps; a LANGUAGE sql function with a SET clause is never inlined and is
-- planned again at every call.

-- The role is one per cluster, whichever schemas pgfence lives in: each
-- schema's migration grants to it. Creating it tolerates another
-- migration's creating it at the same time (a schema of another database);
-- migrations of this database's schemas take turns here, so that a down of
-- another schema never drops the role between this check and the grants
-- below. A migrating role that may not create roles gets an error whose
-- hint is the one command an administrator runs; nothing is changed then.
DO $$
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended('pgfence_client role', 0));
  IF EXISTS (SELECT FROM pg_roles AS r WHERE r.rolname = 'pgfence_client') THEN
    RETURN;
  END IF;
  BEGIN
    CREATE ROLE pgfence_client NOLOGIN;
  EXCEPTION
    WHEN duplicate_object OR unique_violation THEN
      NULL;
    WHEN insufficient_privilege THEN
      RAISE EXCEPTION 'pgfence: role pgfence_client does not exist, and role % may not create it', quote_ident(current_user)
        USING ERRCODE = '42501',
              HINT = 'As a superuser or a role with CREATEROLE, run once for the whole cluster: CREATE ROLE pgfence_client NOLOGIN; then run pgfence migrate up again.';
  END;
END
$$;

-- pgfence_refuse_args: raises SQLSTATE PF005 naming the first argument of
-- p_fn that is out of bounds. The functions below call it only when their
-- one cheap check of every argument failed; an argument a function does not
-- take keeps its default, which is in bounds.
CREATE FUNCTION pgfence_refuse_args(p_fn text, p_key text DEFAULT 'k', p_owner text DEFAULT 'o', p_token text DEFAULT 't',
                                    p_ttl_micros bigint DEFAULT 10000, p_hold_micros bigint DEFAULT 0, p_fence bigint DEFAULT 1)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
  IF (octet_length(p_key) BETWEEN 1 AND 512) IS NOT TRUE THEN
    RAISE EXCEPTION '%: the key must be 1 to 512 bytes, got %', p_fn, coalesce(octet_length(p_key)::text || ' bytes', 'NULL')
      USING ERRCODE = 'PF005';
  END IF;
  IF (octet_length(p_owner) BETWEEN 1 AND 256) IS NOT TRUE THEN
    RAISE EXCEPTION '%: the owner label must be 1 to 256 bytes, got %', p_fn, coalesce(octet_length(p_owner)::text || ' bytes', 'NULL')
      USING ERRCODE = 'PF005';
  END IF;
  IF (octet_length(p_token) BETWEEN 1 AND 256) IS NOT TRUE THEN
    RAISE EXCEPTION '%: the owner token must be 1 to 256 bytes, got %', p_fn, coalesce(octet_length(p_token)::text || ' bytes', 'NULL')
      USING ERRCODE = 'PF005';
  END IF;
  IF (p_ttl_micros BETWEEN 10000 AND 86400000000) IS NOT TRUE THEN
    RAISE EXCEPTION '%: the TTL of % microseconds is outside [10 ms, 24 h]', p_fn, coalesce(p_ttl_micros::text, 'NULL')
      USING ERRCODE = 'PF005';
  END IF;
  IF (p_hold_micros BETWEEN 0 AND 86400000000) IS NOT TRUE THEN
    RAISE EXCEPTION '%: the minimum hold of % microseconds is outside [0, 24 h]', p_fn, coalesce(p_hold_micros::text, 'NULL')
      USING ERRCODE = 'PF005';
  END IF;
  IF (p_fence > 0) IS NOT TRUE THEN
    RAISE EXCEPTION '%: the fence must be positive, got %', p_fn, coalesce(p_fence::text, 'NULL')
      USING ERRCODE = 'PF005';
  END IF;
  RAISE EXCEPTION '%: an argument is out of bounds', p_fn USING ERRCODE = 'PF005';
END
$$;

-- pgfence_lease_acquire: the plain lease's acquisition (fencedb's Acquire,
-- which documents it): no row when the key is held or the token was
-- abandoned.
CREATE FUNCTION pgfence_lease_acquire(p_key text, p_owner text, p_token text, p_ttl_micros bigint)
RETURNS TABLE (fence bigint, expires_at timestamptz)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
  IF (octet_length(p_key) BETWEEN 1 AND 512 AND octet_length(p_owner) BETWEEN 1 AND 256
      AND octet_length(p_token) BETWEEN 1 AND 256 AND p_ttl_micros BETWEEN 10000 AND 86400000000) IS NOT TRUE THEN
    PERFORM pgfence_refuse_args('pgfence_lease_acquire', p_key, p_owner, p_token, p_ttl_micros);
  END IF;
  RETURN QUERY
  INSERT INTO lock_leases AS l (lock_key, owner, owner_token, fence, acquired_at, expires_at)
  SELECT p_key, p_owner, p_token, pgfence_draw_fence(), now(), now() + p_ttl_micros * interval '1 microsecond'
   WHERE pgfence_commit_durably()
     AND set_config('lock_timeout', '1s', true) IS NOT NULL
     AND NOT EXISTS (SELECT FROM pgfence_abandoned_tokens AS a WHERE a.owner_token = p_token)
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
  RETURNING l.fence, l.expires_at;
END
$$;

-- pgfence_lease_acquire_batch: pgfence_lease_acquire for several distinct
-- keys in one statement, rows written in key order (AcquireBatch).
CREATE FUNCTION pgfence_lease_acquire_batch(p_owner text, p_keys text[], p_tokens text[], p_ttls_micros bigint[])
RETURNS TABLE (owner_token text, fence bigint, expires_at timestamptz)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  bad record;
BEGIN
  SELECT r.k, r.t, r.m INTO bad
    FROM ROWS FROM (unnest(p_keys), unnest(p_tokens), unnest(p_ttls_micros)) AS r(k, t, m)
   WHERE (octet_length(r.k) BETWEEN 1 AND 512 AND octet_length(r.t) BETWEEN 1 AND 256
          AND r.m BETWEEN 10000 AND 86400000000) IS NOT TRUE
   LIMIT 1;
  IF FOUND THEN
    PERFORM pgfence_refuse_args('pgfence_lease_acquire_batch', bad.k, p_owner, bad.t, bad.m);
  END IF;
  IF (octet_length(p_owner) BETWEEN 1 AND 256) IS NOT TRUE THEN
    PERFORM pgfence_refuse_args('pgfence_lease_acquire_batch', p_owner => p_owner);
  END IF;
  RETURN QUERY
  INSERT INTO lock_leases AS l (lock_key, owner, owner_token, fence, acquired_at, expires_at)
  SELECT r.lock_key, p_owner, r.owner_token, pgfence_draw_fence(), now(), now() + r.ttl_micros * interval '1 microsecond'
    FROM ROWS FROM (unnest(p_keys), unnest(p_tokens), unnest(p_ttls_micros)) AS r(lock_key, owner_token, ttl_micros)
   WHERE pgfence_commit_durably()
     AND set_config('lock_timeout', '1s', true) IS NOT NULL
     AND NOT EXISTS (SELECT FROM pgfence_abandoned_tokens AS a WHERE a.owner_token = r.owner_token)
   ORDER BY r.lock_key
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
  RETURNING l.owner_token, l.fence, l.expires_at;
END
$$;

-- pgfence_lease_renew: extends the plain lease of key that carries p_fence
-- while it is unexpired, committing durably (Renew).
CREATE FUNCTION pgfence_lease_renew(p_key text, p_fence bigint, p_ttl_micros bigint)
RETURNS TABLE (expires_at timestamptz)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
  IF (octet_length(p_key) BETWEEN 1 AND 512 AND p_ttl_micros BETWEEN 10000 AND 86400000000) IS NOT TRUE THEN
    PERFORM pgfence_refuse_args('pgfence_lease_renew', p_key, p_ttl_micros => p_ttl_micros);
  END IF;
  RETURN QUERY
  UPDATE lock_leases AS l
     SET expires_at = now() + p_ttl_micros * interval '1 microsecond'
   WHERE l.lock_key = p_key
     AND l.slot = 0
     AND l.kind = 'exclusive'
     AND l.fence = p_fence
     AND l.expires_at > now()
     AND pgfence_commit_durably()
  RETURNING l.expires_at;
END
$$;

-- pgfence_lease_release: gives the plain lease of key that carries p_fence
-- back (Release, ReleaseNotify, ReleaseHeldAtLeast): now, or with a minimum
-- hold at its grant time plus p_hold_micros if that is later; asynchronous
-- commit unless p_durable; with p_notify, NOTIFY pgfence_lease_released with
-- the key. One row (true) when it released the lease.
CREATE FUNCTION pgfence_lease_release(p_key text, p_fence bigint, p_hold_micros bigint, p_durable boolean, p_notify boolean)
RETURNS TABLE (released boolean)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
  IF (octet_length(p_key) BETWEEN 1 AND 512 AND p_hold_micros BETWEEN 0 AND 86400000000) IS NOT TRUE THEN
    PERFORM pgfence_refuse_args('pgfence_lease_release', p_key, p_hold_micros => p_hold_micros);
  END IF;
  IF p_hold_micros = 0 THEN
    UPDATE lock_leases AS l
       SET expires_at = now(), released_at = now()
     WHERE l.lock_key = p_key
       AND l.slot = 0
       AND l.kind = 'exclusive'
       AND l.fence = p_fence
       AND l.expires_at > now()
       AND CASE WHEN p_durable THEN pgfence_commit_durably()
                ELSE set_config('synchronous_commit', 'off', true) = 'off' END;
  ELSE
    UPDATE lock_leases AS l
       SET expires_at = GREATEST(now(), l.acquired_at + p_hold_micros * interval '1 microsecond'),
           released_at = now()
     WHERE l.lock_key = p_key
       AND l.slot = 0
       AND l.kind = 'exclusive'
       AND l.fence = p_fence
       AND l.expires_at > now()
       AND CASE WHEN p_durable THEN pgfence_commit_durably()
                ELSE set_config('synchronous_commit', 'off', true) = 'off' END;
  END IF;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  IF p_notify THEN
    PERFORM pg_notify('pgfence_lease_released', p_key);
  END IF;
  released := true;
  RETURN NEXT;
END
$$;

-- pgfence_lease_find: the unexpired grant of key under owner token p_token,
-- in whichever slot (FindByOwnerToken, FindSlotByOwnerToken). Only the
-- holder knows its token, so only it learns anything here.
CREATE FUNCTION pgfence_lease_find(p_key text, p_token text)
RETURNS TABLE (slot integer, fence bigint, expires_at timestamptz)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
  IF (octet_length(p_key) BETWEEN 1 AND 512 AND octet_length(p_token) BETWEEN 1 AND 256) IS NOT TRUE THEN
    PERFORM pgfence_refuse_args('pgfence_lease_find', p_key, p_token => p_token);
  END IF;
  RETURN QUERY
  SELECT l.slot, l.fence, l.expires_at
    FROM lock_leases AS l
   WHERE l.lock_key = p_key
     AND l.owner_token = p_token
     AND l.expires_at > now();
END
$$;

-- pgfence_lease_abandon: gives up an ambiguous plain acquisition under
-- p_token (Abandon, which documents it): tombstones the token, releases the
-- key's lease if the token holds it, and returns its fence.
CREATE FUNCTION pgfence_lease_abandon(p_key text, p_token text, p_notify boolean)
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
  IF (octet_length(p_key) BETWEEN 1 AND 512 AND octet_length(p_token) BETWEEN 1 AND 256) IS NOT TRUE THEN
    PERFORM pgfence_refuse_args('pgfence_lease_abandon', p_key, p_token => p_token);
  END IF;
  RETURN QUERY
  WITH tombstone AS (
    INSERT INTO pgfence_abandoned_tokens AS a (owner_token)
    VALUES (p_token)
    ON CONFLICT ON CONSTRAINT pgfence_abandoned_tokens_pkey DO NOTHING
  ), released AS (
    UPDATE lock_leases AS l
       SET expires_at = CASE WHEN l.owner_token = p_token
                             THEN LEAST(l.expires_at, now())
                             ELSE l.expires_at END,
           released_at = CASE WHEN l.owner_token = p_token AND l.expires_at > now()
                              THEN now()
                              ELSE l.released_at END
     WHERE l.lock_key = p_key AND l.slot = 0
    RETURNING l.lock_key, l.fence, (l.owner_token = p_token AND l.expires_at = now()) AS ours
  )
  SELECT r.fence
    FROM released AS r,
         LATERAL (SELECT CASE WHEN p_notify THEN pg_notify('pgfence_lease_released', r.lock_key) END) AS notified
   WHERE r.ours;
END
$$;

-- pgfence_leave_queue: a waiter gives its place in key's queue back
-- (LeaveQueue).
CREATE FUNCTION pgfence_leave_queue(p_key text, p_token text)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
  IF (octet_length(p_key) BETWEEN 1 AND 512 AND octet_length(p_token) BETWEEN 1 AND 256) IS NOT TRUE THEN
    PERFORM pgfence_refuse_args('pgfence_leave_queue', p_key, p_token => p_token);
  END IF;
  DELETE FROM pgfence_waiters AS w WHERE w.lock_key = p_key AND w.owner_token = p_token;
END
$$;

-- pgfence_attempt: pgfence_acquire_kind (AcquireKind, AcquireQueued) with
-- its arguments checked. A waiter's place lasts at most 24 hours past its
-- last attempt.
CREATE FUNCTION pgfence_attempt(p_key text, p_kind text, p_permits integer, p_owner text, p_token text,
                                p_ttl_micros bigint, p_place_micros bigint, p_queued boolean)
RETURNS TABLE (slot integer, fence bigint, expires_at timestamptz, ahead integer)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
  IF (octet_length(p_key) BETWEEN 1 AND 512 AND octet_length(p_owner) BETWEEN 1 AND 256
      AND octet_length(p_token) BETWEEN 1 AND 256 AND p_ttl_micros BETWEEN 10000 AND 86400000000
      AND p_place_micros >= 0 AND p_queued IS NOT NULL) IS NOT TRUE THEN
    PERFORM pgfence_refuse_args('pgfence_attempt', p_key, p_owner, p_token, p_ttl_micros, p_place_micros);
  END IF;
  RETURN QUERY
  SELECT r.slot, r.fence, r.expires_at, r.ahead
    FROM pgfence_acquire_kind(p_key, p_kind, p_permits, p_owner, p_token, p_ttl_micros,
                              LEAST(p_place_micros, 86400000000), p_queued) AS r;
END
$$;

-- pgfence_renew_grant: pgfence_renew_slot (RenewSlot) with its arguments
-- checked.
CREATE FUNCTION pgfence_renew_grant(p_key text, p_fence bigint, p_ttl_micros bigint)
RETURNS TABLE (expires_at timestamptz)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
  IF (octet_length(p_key) BETWEEN 1 AND 512 AND p_ttl_micros BETWEEN 10000 AND 86400000000) IS NOT TRUE THEN
    PERFORM pgfence_refuse_args('pgfence_renew_grant', p_key, p_ttl_micros => p_ttl_micros);
  END IF;
  RETURN QUERY SELECT r.expires_at FROM pgfence_renew_slot(p_key, p_fence, p_ttl_micros) AS r;
END
$$;

-- pgfence_release_grant: pgfence_release_slot (ReleaseSlot) with its
-- arguments checked.
CREATE FUNCTION pgfence_release_grant(p_key text, p_fence bigint, p_hold_micros bigint, p_durable boolean, p_notify boolean)
RETURNS TABLE (released boolean)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
  IF (octet_length(p_key) BETWEEN 1 AND 512 AND p_hold_micros BETWEEN 0 AND 86400000000) IS NOT TRUE THEN
    PERFORM pgfence_refuse_args('pgfence_release_grant', p_key, p_hold_micros => p_hold_micros);
  END IF;
  RETURN QUERY SELECT r.released FROM pgfence_release_slot(p_key, p_fence, p_hold_micros, p_durable, p_notify) AS r;
END
$$;

-- pgfence_abandon_grant: pgfence_abandon_slot (AbandonSlot) with its
-- arguments checked. An empty token would name the summary rows of keys
-- held shared or as permits, whose owner_token is empty.
CREATE FUNCTION pgfence_abandon_grant(p_key text, p_token text)
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
  IF (octet_length(p_key) BETWEEN 1 AND 512 AND octet_length(p_token) BETWEEN 1 AND 256) IS NOT TRUE THEN
    PERFORM pgfence_refuse_args('pgfence_abandon_grant', p_key, p_token => p_token);
  END IF;
  RETURN QUERY SELECT r FROM pgfence_abandon_slot(p_key, p_token) AS r;
END
$$;

-- pgfence_take_set: the 4-argument pgfence_acquire_set (AcquireKeySet) with
-- its arguments checked, at most 64 keys.
CREATE FUNCTION pgfence_take_set(p_keys text[], p_owner text, p_token text, p_ttl_micros bigint)
RETURNS TABLE (lock_key text, fence bigint, expires_at timestamptz)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  bad text;
BEGIN
  SELECT k INTO bad FROM unnest(p_keys) AS k WHERE (octet_length(k) BETWEEN 1 AND 512) IS NOT TRUE LIMIT 1;
  IF FOUND OR (octet_length(p_owner) BETWEEN 1 AND 256 AND octet_length(p_token) BETWEEN 1 AND 256
               AND p_ttl_micros BETWEEN 10000 AND 86400000000) IS NOT TRUE THEN
    PERFORM pgfence_refuse_args('pgfence_take_set', CASE WHEN FOUND THEN bad ELSE 'k' END, p_owner, p_token, p_ttl_micros);
  END IF;
  IF cardinality(p_keys) > 64 THEN
    RAISE EXCEPTION 'pgfence_take_set: a key set has at most 64 keys, got %', cardinality(p_keys) USING ERRCODE = 'PF005';
  END IF;
  RETURN QUERY SELECT r.lock_key, r.fence, r.expires_at FROM pgfence_acquire_set(p_keys, p_owner, p_token, p_ttl_micros) AS r;
END
$$;

-- pgfence_renew_set: a key set's plain leases renewed in one statement,
-- each matched on key and fence and only while unexpired (RenewKeySet).
CREATE FUNCTION pgfence_renew_set(p_keys text[], p_fences bigint[], p_ttl_micros bigint)
RETURNS TABLE (lock_key text, expires_at timestamptz)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
  IF (p_ttl_micros BETWEEN 10000 AND 86400000000) IS NOT TRUE THEN
    PERFORM pgfence_refuse_args('pgfence_renew_set', p_ttl_micros => p_ttl_micros);
  END IF;
  RETURN QUERY
  WITH k AS (
    SELECT unnest(p_keys) AS lock_key, unnest(p_fences) AS fence
  ), locked AS (
    SELECT r.lock_key FROM lock_leases AS r
     WHERE r.lock_key IN (SELECT k.lock_key FROM k) AND r.slot = 0
     ORDER BY r.lock_key
       FOR UPDATE
  )
  UPDATE lock_leases AS l
     SET expires_at = now() + p_ttl_micros * interval '1 microsecond'
    FROM k
   WHERE l.lock_key = k.lock_key
     AND l.slot = 0
     AND l.kind = 'exclusive'
     AND l.lock_key IN (SELECT locked.lock_key FROM locked)
     AND l.fence = k.fence
     AND l.expires_at > now()
     AND pgfence_commit_durably()
  RETURNING l.lock_key, l.expires_at;
END
$$;

-- pgfence_release_set: a key set's plain leases released in one statement,
-- each matched on key and fence, each with its minimum hold (ReleaseKeySet).
CREATE FUNCTION pgfence_release_set(p_keys text[], p_fences bigint[], p_holds_micros bigint[], p_durable boolean, p_notify boolean)
RETURNS TABLE (lock_key text)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  bad bigint;
BEGIN
  SELECT h INTO bad FROM unnest(p_holds_micros) AS h WHERE (h BETWEEN 0 AND 86400000000) IS NOT TRUE LIMIT 1;
  IF FOUND THEN
    PERFORM pgfence_refuse_args('pgfence_release_set', p_hold_micros => bad);
  END IF;
  RETURN QUERY
  WITH k AS (
    SELECT unnest(p_keys) AS lock_key, unnest(p_fences) AS fence, unnest(p_holds_micros) AS hold_micros
  ), locked AS (
    SELECT r.lock_key FROM lock_leases AS r
     WHERE r.lock_key IN (SELECT k.lock_key FROM k) AND r.slot = 0
     ORDER BY r.lock_key
       FOR UPDATE
  )
  UPDATE lock_leases AS l
     SET expires_at = GREATEST(now(), l.acquired_at + k.hold_micros * interval '1 microsecond'),
         released_at = now()
    FROM k
   WHERE l.lock_key = k.lock_key
     AND l.slot = 0
     AND l.kind = 'exclusive'
     AND l.lock_key IN (SELECT locked.lock_key FROM locked)
     AND l.fence = k.fence
     AND l.expires_at > now()
     AND CASE WHEN p_durable THEN pgfence_commit_durably()
              ELSE set_config('synchronous_commit', 'off', true) = 'off' END
  RETURNING CASE WHEN p_notify
                 THEN (SELECT l.lock_key FROM (SELECT pg_notify('pgfence_lease_released', l.lock_key)) AS n)
                 ELSE l.lock_key END::text;
END
$$;

-- The sweeps (SweepExpiredBatch, SweepPlacesBatch,
-- SweepAbandonedTokensBatch, which document them) delete only rows expired
-- longer than a grace period that may not be negative, and tombstones at
-- least an hour old (pglease keeps them an hour: a tombstone must outlive
-- every acquisition under its token still in flight).
CREATE FUNCTION pgfence_sweep_leases(p_after_key text, p_after_slot integer, p_batch_size integer, p_grace_micros bigint)
RETURNS TABLE (o_scanned bigint, o_last_key text, o_last_slot integer, o_deleted bigint)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
  IF (p_grace_micros >= 0 AND p_batch_size >= 1) IS NOT TRUE THEN
    RAISE EXCEPTION 'pgfence_sweep_leases: the grace period (% microseconds) must not be negative and the batch (%) must be positive',
      coalesce(p_grace_micros::text, 'NULL'), coalesce(p_batch_size::text, 'NULL') USING ERRCODE = 'PF005';
  END IF;
  PERFORM set_config('synchronous_commit', 'off', true);
  RETURN QUERY
  WITH batch AS (
    SELECT b.lock_key, b.slot, b.expires_at
      FROM lock_leases AS b
     WHERE (b.lock_key, b.slot) > (p_after_key, p_after_slot)
     ORDER BY b.lock_key, b.slot
     LIMIT p_batch_size
  ), gone AS (
    DELETE FROM lock_leases AS l
     WHERE (l.lock_key, l.slot) IN (SELECT b.lock_key, b.slot FROM batch AS b
                                     WHERE b.expires_at < now() - p_grace_micros * interval '1 microsecond')
       AND l.expires_at < now() - p_grace_micros * interval '1 microsecond'
    RETURNING 1
  ), tail AS (
    SELECT b.lock_key, b.slot FROM batch AS b ORDER BY b.lock_key DESC, b.slot DESC LIMIT 1
  )
  SELECT (SELECT count(*) FROM batch)::bigint,
         COALESCE((SELECT t.lock_key FROM tail AS t), '')::text,
         COALESCE((SELECT t.slot FROM tail AS t), -1)::integer,
         (SELECT count(*) FROM gone)::bigint;
END
$$;

CREATE FUNCTION pgfence_sweep_tombstones(p_after_token text, p_batch_size integer, p_retention_micros bigint)
RETURNS TABLE (o_scanned bigint, o_last_token text, o_deleted bigint)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
  IF (p_retention_micros >= 3600000000 AND p_batch_size >= 1) IS NOT TRUE THEN
    RAISE EXCEPTION 'pgfence_sweep_tombstones: the retention (% microseconds) must be at least an hour and the batch (%) positive',
      coalesce(p_retention_micros::text, 'NULL'), coalesce(p_batch_size::text, 'NULL') USING ERRCODE = 'PF005';
  END IF;
  PERFORM set_config('synchronous_commit', 'off', true);
  RETURN QUERY
  WITH batch AS (
    SELECT a.owner_token, a.abandoned_at
      FROM pgfence_abandoned_tokens AS a
     WHERE a.owner_token > p_after_token
     ORDER BY a.owner_token
     LIMIT p_batch_size
  ), gone AS (
    DELETE FROM pgfence_abandoned_tokens AS a
     WHERE a.owner_token = ANY (ARRAY(SELECT b.owner_token FROM batch AS b
                                       WHERE b.abandoned_at < now() - p_retention_micros * interval '1 microsecond'))
       AND a.abandoned_at < now() - p_retention_micros * interval '1 microsecond'
    RETURNING 1
  )
  SELECT (SELECT count(*) FROM batch)::bigint,
         COALESCE((SELECT max(b.owner_token) FROM batch AS b), '')::text,
         (SELECT count(*) FROM gone)::bigint;
END
$$;

CREATE FUNCTION pgfence_sweep_places(p_grace_micros bigint, p_batch_size integer)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  n bigint;
BEGIN
  IF (p_grace_micros >= 0 AND p_batch_size >= 1) IS NOT TRUE THEN
    RAISE EXCEPTION 'pgfence_sweep_places: the grace period (% microseconds) must not be negative and the batch (%) must be positive',
      coalesce(p_grace_micros::text, 'NULL'), coalesce(p_batch_size::text, 'NULL') USING ERRCODE = 'PF005';
  END IF;
  PERFORM set_config('synchronous_commit', 'off', true);
  WITH cutoff AS (
    SELECT now() - p_grace_micros * interval '1 microsecond' AS at
  ), places AS (
    DELETE FROM pgfence_waiters AS w
     WHERE w.ctid = ANY (ARRAY(SELECT x.ctid FROM pgfence_waiters AS x
                                WHERE x.expires_at < (SELECT c.at FROM cutoff AS c) LIMIT p_batch_size))
       AND w.expires_at < (SELECT c.at FROM cutoff AS c)
    RETURNING 1
  )
  SELECT count(*) INTO n FROM places;
  RETURN n;
END
$$;

-- The functions above, and the SQL contract's lease functions (migration
-- 000013), run as the schema's owner with their search_path pinned; only
-- the owner and pgfence_client may call them. The helpers they call stay
-- SECURITY INVOKER: called by any other role they write nothing, for want
-- of privileges on the tables.
DO $$
DECLARE
  f regprocedure;
BEGIN
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc AS p
            WHERE p.pronamespace = (SELECT n.oid FROM pg_namespace AS n WHERE n.nspname = current_schema())
              AND (p.proname IN ('pgfence_lease_acquire', 'pgfence_lease_acquire_batch', 'pgfence_lease_renew',
                                 'pgfence_lease_release', 'pgfence_lease_find', 'pgfence_lease_abandon',
                                 'pgfence_leave_queue', 'pgfence_attempt', 'pgfence_renew_grant',
                                 'pgfence_release_grant', 'pgfence_abandon_grant', 'pgfence_take_set',
                                 'pgfence_renew_set', 'pgfence_release_set', 'pgfence_sweep_leases',
                                 'pgfence_sweep_tombstones', 'pgfence_sweep_places',
                                 'pgfence_acquire', 'pgfence_acquire_shared', 'pgfence_acquire_permit',
                                 'pgfence_renew', 'pgfence_release')
                   OR p.oid = 'pgfence_acquire_set(text[], interval, text)'::regprocedure) LOOP
    EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = %I, pg_temp', f, current_schema());
    EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO pgfence_client', f);
  END LOOP;
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc AS p
            WHERE p.pronamespace = (SELECT n.oid FROM pg_namespace AS n WHERE n.nspname = current_schema())
              AND p.proname = 'pgfence_refuse_args' LOOP
    EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', f, current_schema());
  END LOOP;
  -- The wake-up triggers are deferred to commit, when the function that
  -- wrote has returned: they run as the owner too.
  ALTER FUNCTION pgfence_wake_on_change() SECURITY DEFINER;
  REVOKE ALL ON FUNCTION pgfence_wake_on_change() FROM PUBLIC;
  EXECUTE format('GRANT USAGE ON SCHEMA %I TO pgfence_client', current_schema());
  -- golang-migrate's version table, when a tool of its kind applied the
  -- files: the clients and the CLI read the version.
  IF to_regclass(format('%I.pgfence_schema_migrations', current_schema())) IS NOT NULL THEN
    GRANT SELECT ON pgfence_schema_migrations TO pgfence_client;
  END IF;
END
$$;

GRANT SELECT (lock_key, slot, kind, permits, owner, fence, acquired_at, expires_at, released_at, has_waiters)
   ON lock_leases TO pgfence_client;
GRANT SELECT (lock_key, kind, permits, owner, queued, ticket, expires_at) ON pgfence_waiters TO pgfence_client;
GRANT USAGE ON SEQUENCE pgfence_fence_seq, pgfence_stale_refusals, pgfence_jobs_id_seq TO pgfence_client;
GRANT SELECT, INSERT, UPDATE, DELETE ON pgfence_jobs, payout_intents TO pgfence_client;
