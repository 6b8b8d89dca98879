ALTER TABLE pgfence_jobs RENAME COLUMN expires_at TO lease_until;
