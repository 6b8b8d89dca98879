CREATE INDEX IF NOT EXISTS lock_leases_expires_at_idx ON lock_leases (expires_at);

DROP TABLE IF EXISTS pgfence_abandoned_tokens;

-- pgfence_next_fence() as migration 000001 made it.
CREATE OR REPLACE FUNCTION pgfence_next_fence() RETURNS bigint
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

DROP FUNCTION IF EXISTS pgfence_commit_durably();
DROP FUNCTION IF EXISTS pgfence_draw_fence();
DROP DOMAIN IF EXISTS pgfence_fence_timeline;
