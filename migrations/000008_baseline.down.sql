-- Drops every object of pgfence's schema. Fences issued after a later up
-- start again from the bottom, so only do this when nothing still holds or
-- remembers a fence from this database.
DROP FUNCTION IF EXISTS pgfence_release(text, bigint);
DROP FUNCTION IF EXISTS pgfence_renew(text, bigint, interval);
DROP FUNCTION IF EXISTS pgfence_acquire(text, interval, text);
DROP FUNCTION IF EXISTS pgfence_check_lease_call(text, text, interval, text, bigint);
DROP TABLE IF EXISTS pgfence_jobs;
DROP TABLE IF EXISTS payout_intents;
-- Not CASCADE: a table that still has a fencing trigger keeps it, and this
-- fails, rather than silently losing its enforcement. Remove those triggers
-- first (pgguard.RemoveTrigger).
DROP FUNCTION IF EXISTS pgfence_enforce_fence();
DROP FUNCTION IF EXISTS pgfence_set_fence(bigint, boolean);
DROP TABLE IF EXISTS pgfence_abandoned_tokens;
DROP TABLE IF EXISTS lock_leases;
DROP FUNCTION IF EXISTS pgfence_fence_ceiling();
DROP FUNCTION IF EXISTS pgfence_next_fence();
DROP FUNCTION IF EXISTS pgfence_draw_fence();
DROP SEQUENCE IF EXISTS pgfence_stale_refusals;
DROP FUNCTION IF EXISTS pgfence_commit_durably();
DROP FUNCTION IF EXISTS pgfence_timeline();
DROP DOMAIN IF EXISTS pgfence_fence_timeline;
DROP SEQUENCE IF EXISTS pgfence_fence_seq;
