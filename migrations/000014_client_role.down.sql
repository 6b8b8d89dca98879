-- Back to version 13: the functions run as their caller again, callable by
-- any role; pgfence_client loses every privilege in this schema, and the
-- role itself is dropped when nothing else uses it (no privilege in any
-- schema or database, no member, no object of its own) and the migrating
-- role may drop it.

DROP FUNCTION pgfence_lease_acquire(text, text, text, bigint);
DROP FUNCTION pgfence_lease_acquire_batch(text, text[], text[], bigint[]);
DROP FUNCTION pgfence_lease_renew(text, bigint, bigint);
DROP FUNCTION pgfence_lease_release(text, bigint, bigint, boolean, boolean);
DROP FUNCTION pgfence_lease_find(text, text);
DROP FUNCTION pgfence_lease_abandon(text, text, boolean);
DROP FUNCTION pgfence_leave_queue(text, text);
DROP FUNCTION pgfence_attempt(text, text, integer, text, text, bigint, bigint, boolean);
DROP FUNCTION pgfence_renew_grant(text, bigint, bigint);
DROP FUNCTION pgfence_release_grant(text, bigint, bigint, boolean, boolean);
DROP FUNCTION pgfence_abandon_grant(text, text);
DROP FUNCTION pgfence_take_set(text[], text, text, bigint);
DROP FUNCTION pgfence_renew_set(text[], bigint[], bigint);
DROP FUNCTION pgfence_release_set(text[], bigint[], bigint[], boolean, boolean);
DROP FUNCTION pgfence_sweep_leases(text, integer, integer, bigint);
DROP FUNCTION pgfence_sweep_tombstones(text, integer, bigint);
DROP FUNCTION pgfence_sweep_places(bigint, integer);
DROP FUNCTION pgfence_refuse_args(text, text, text, text, bigint, bigint, bigint);

DO $$
DECLARE
  f regprocedure;
  r oid;
BEGIN
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc AS p
            WHERE p.pronamespace = (SELECT n.oid FROM pg_namespace AS n WHERE n.nspname = current_schema())
              AND (p.proname IN ('pgfence_acquire', 'pgfence_acquire_shared', 'pgfence_acquire_permit',
                                 'pgfence_renew', 'pgfence_release')
                   OR p.oid = 'pgfence_acquire_set(text[], interval, text)'::regprocedure) LOOP
    EXECUTE format('ALTER FUNCTION %s SECURITY INVOKER', f);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO PUBLIC', f);
  END LOOP;
  ALTER FUNCTION pgfence_wake_on_change() SECURITY INVOKER;
  GRANT EXECUTE ON FUNCTION pgfence_wake_on_change() TO PUBLIC;
  -- Serialised with the up migrations of this database's other schemas,
  -- which grant to the role.
  PERFORM pg_advisory_xact_lock(hashtextextended('pgfence_client role', 0));
  SELECT a.oid INTO r FROM pg_roles AS a WHERE a.rolname = 'pgfence_client';
  IF r IS NULL THEN
    RETURN;
  END IF;
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc AS p
            WHERE p.pronamespace = (SELECT n.oid FROM pg_namespace AS n WHERE n.nspname = current_schema())
              AND (p.proname IN ('pgfence_acquire', 'pgfence_acquire_shared', 'pgfence_acquire_permit',
                                 'pgfence_renew', 'pgfence_release')
                   OR p.oid = 'pgfence_acquire_set(text[], interval, text)'::regprocedure) LOOP
    EXECUTE format('REVOKE ALL ON FUNCTION %s FROM pgfence_client', f);
  END LOOP;
  REVOKE ALL ON lock_leases, pgfence_waiters, pgfence_jobs, payout_intents FROM pgfence_client;
  REVOKE ALL ON SEQUENCE pgfence_fence_seq, pgfence_stale_refusals, pgfence_jobs_id_seq FROM pgfence_client;
  IF to_regclass(format('%I.pgfence_schema_migrations', current_schema())) IS NOT NULL THEN
    REVOKE ALL ON pgfence_schema_migrations FROM pgfence_client;
  END IF;
  EXECUTE format('REVOKE ALL ON SCHEMA %I FROM pgfence_client', current_schema());
  IF EXISTS (SELECT FROM pg_shdepend AS d WHERE d.refclassid = 'pg_authid'::regclass AND d.refobjid = r)
     OR EXISTS (SELECT FROM pg_auth_members AS m WHERE m.roleid = r OR m.member = r) THEN
    RETURN;
  END IF;
  BEGIN
    DROP ROLE pgfence_client;
  EXCEPTION
    WHEN insufficient_privilege OR dependent_objects_still_exist OR undefined_object THEN
      RAISE NOTICE 'pgfence: role pgfence_client is kept: %', SQLERRM;
  END;
END
$$;
