DROP TABLE IF EXISTS lock_leases;
DROP FUNCTION IF EXISTS pgfence_next_fence();
DROP FUNCTION IF EXISTS pgfence_timeline();
DROP SEQUENCE IF EXISTS pgfence_fence_seq;
