-- pgfence lease core: the fence source and the lock_leases table.
--
-- Fencing tokens must never repeat and never go backwards
-- for a key, across release, deletion of the lease row, a crash-restart and
-- the promotion of an asynchronous standby. So a fence is not a per-row
-- counter. It is
--
--     fence = timeline << 44 | nextval('pgfence_fence_seq')
--
--   * the sequence survives deletion of rows (a per-row counter restarts at 1);
--   * a sequence value is WAL-logged before it is handed out, and an
--     acquisition commits durably, so after a crash the sequence resumes above
--     every fence that was ever granted;
--   * a promoted standby may have missed the newest sequence values, but its
--     WAL timeline is higher than the old primary's, so every fence it issues
--     is above every fence the old primary issued.
-- 44 bits of sequence are 17.6e12 grants; 19 bits of timeline are 524,287
-- promotions. Both limits raise an error instead of wrapping.

CREATE SEQUENCE pgfence_fence_seq AS bigint MINVALUE 1 MAXVALUE 17592186044415 NO CYCLE;

-- The server's current WAL timeline. pg_walfile_name is readable by a plain
-- role (pg_control_checkpoint() is not), and pg_current_wal_lsn() refuses to
-- run on a standby, which is right: only a primary may grant.
CREATE FUNCTION pgfence_timeline() RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
  SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint
$$;

CREATE FUNCTION pgfence_next_fence() RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  tli bigint := pgfence_timeline();
BEGIN
  IF tli >= 524288 THEN
    RAISE EXCEPTION 'pgfence: WAL timeline % does not fit in a fence (at most 524287)', tli;
  END IF;
  RETURN (tli << 44) | nextval('pgfence_fence_seq');
END
$$;

CREATE TABLE lock_leases (
  lock_key    text        PRIMARY KEY CHECK (octet_length(lock_key) BETWEEN 1 AND 512),
  owner       text        NOT NULL,            -- for humans and dashboards
  owner_token text        NOT NULL,            -- random per acquisition: resolves ambiguous outcomes
  fence       bigint      NOT NULL CHECK (fence > 0),
  acquired_at timestamptz NOT NULL,
  expires_at  timestamptz NOT NULL
);

-- Serves the sweep of long-expired rows.
CREATE INDEX lock_leases_expires_at_idx ON lock_leases (expires_at);
