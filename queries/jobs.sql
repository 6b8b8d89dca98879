-- Typed statements on the ready-made pgfence_jobs table.
-- The statements package claim sends (claim, renew, complete, fail, release,
-- rescue, sweep, ...) are in claim.sql, templated for a table of the user's
-- own; these are the ones that only make sense for pgfence_jobs.

-- name: EnqueueJob :one
-- Inserts one job and notifies listeners on the channel (pass '' for none;
-- the notification is delivered when the transaction commits). run_at is
-- now() + delay by the database clock.
WITH ins AS (
  INSERT INTO /* TEMPLATE: schema */pgfence_jobs (queue, kind, payload, priority, run_at, max_attempts)
  VALUES (sqlc.arg(queue)::text, sqlc.arg(kind)::text, sqlc.arg(payload)::jsonb,
          sqlc.arg(priority)::integer,
          now() + sqlc.arg(delay_micros)::bigint * interval '1 microsecond',
          sqlc.arg(max_attempts)::integer)
  RETURNING id
)
SELECT ins.id,
       (sqlc.arg(notify_channel)::text <> ''
        AND pg_notify(sqlc.arg(notify_channel)::text, sqlc.arg(queue)::text) IS NULL)::boolean AS notified
  FROM ins;

-- name: EnqueueJobs :execrows
-- Inserts one job per element of the arrays (all of one length), in one
-- statement, and notifies the channel once ('' for none).
WITH ins AS (
  INSERT INTO /* TEMPLATE: schema */pgfence_jobs (queue, kind, payload, priority, max_attempts)
  SELECT sqlc.arg(queue)::text, (sqlc.arg(kinds)::text[])[i], (sqlc.arg(payloads)::jsonb[])[i],
         (sqlc.arg(priorities)::integer[])[i], (sqlc.arg(max_attempts)::integer[])[i]
    FROM generate_subscripts(sqlc.arg(kinds)::text[], 1) AS i
  RETURNING 1
), n AS (
  SELECT CASE WHEN sqlc.arg(notify_channel)::text <> '' AND EXISTS (SELECT 1 FROM ins)
              THEN pg_notify(sqlc.arg(notify_channel)::text, sqlc.arg(queue)::text) END
)
SELECT 1 FROM ins, n;

-- name: GetJob :one
-- One job as the database sees it now.
SELECT id, queue, kind, payload, state, priority, run_at, attempt, max_attempts,
       fence, owner, expires_at, last_error, created_at, finished_at,
       (state = 'running' AND expires_at > now())::boolean AS lease_valid
  FROM /* TEMPLATE: schema */pgfence_jobs
 WHERE id = sqlc.arg(id);

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
