DROP TABLE IF EXISTS payout_intents;
-- Not CASCADE: a table that still has a fencing trigger keeps it, and this
-- fails, rather than silently losing its enforcement. Remove those triggers
-- first (pgguard.RemoveTrigger).
DROP FUNCTION IF EXISTS pgfence_enforce_fence();
