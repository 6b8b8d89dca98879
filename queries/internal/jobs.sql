-- name: CountJobsByState :many
-- How many jobs a queue holds in each state.
SELECT state, count(*)::bigint AS n
  FROM /* TEMPLATE: schema */pgfence_jobs
 WHERE queue = sqlc.arg(queue)
 GROUP BY state
 ORDER BY state;

-- name: DeleteFinishedJobs :execrows
-- Deletes completed and dead jobs that finished longer ago than the grace
-- period. Safe at any time: fences come from pgfence_next_fence(), never
-- from the row.
DELETE FROM /* TEMPLATE: schema */pgfence_jobs
 WHERE state IN ('completed', 'dead')
   AND finished_at < now() - sqlc.arg(grace_micros)::bigint * interval '1 microsecond';
