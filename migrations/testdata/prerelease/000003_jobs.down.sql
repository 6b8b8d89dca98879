DROP TABLE IF EXISTS pgfence_jobs;
