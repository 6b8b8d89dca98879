ALTER TABLE lock_leases
  ADD CONSTRAINT lock_leases_lock_key_check CHECK (octet_length(lock_key) BETWEEN 1 AND 512),
  ADD CONSTRAINT lock_leases_fence_check CHECK (fence > 0);
