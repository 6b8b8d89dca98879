-- lock_leases without its two CHECK constraints (key length, fence > 0).
--
-- PostgreSQL reads a table's CHECK constraints from their stored text and
-- plans them again in every INSERT and UPDATE statement that touches the
-- table (ExecRelCheck: stringToNode + expression_planner per statement, not
-- per backend). On lock_leases every acquire, renew and release paid that:
-- a sixth of the server's CPU per acquire + release (BENCHMARKS.md,
-- Profiles), more than anything else a plain lease table does not pay.
--
-- Neither constraint guarded a guarantee:
--   * fence > 0: every fence is drawn by pgfence_draw_fence() or
--     pgfence_next_fence() from pgfence_fence_seq, which starts at 1 and
--     never cycles, so a fence is always positive;
--   * 1 <= octet_length(lock_key) <= 512: pglease refuses such keys before
--     they reach the database (ErrInvalidInput). A caller of the generated
--     fencedb queries who skips pglease may now store a longer key; the
--     primary key's index still refuses one past its entry size limit.
ALTER TABLE lock_leases
  DROP CONSTRAINT lock_leases_lock_key_check,
  DROP CONSTRAINT lock_leases_fence_check;
