-- Typed statements on the ready-made pgfence_jobs table.
-- Package claim claims, renews, completes and sweeps the jobs (on
-- pgfence_jobs or a table of your own); these put jobs in and read one back.

-- name: EnqueueJob :one
-- Inserts one job in state available and returns its id. Unless
-- notify_channel is empty, it notifies that channel with the queue as
-- payload; the notification is delivered when the transaction commits, so
-- run it in the transaction that makes the job's data visible. run_at is
-- now() + delay by the database clock. It never deduplicates: each call
-- inserts a job.
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
-- Inserts one job per element of kinds, in one statement, available now,
-- and notifies notify_channel once (unless it is empty); it returns how
-- many it inserted. The other arrays must be as long as kinds: a shorter one leaves
-- NULLs that the NOT NULL columns refuse, and then nothing is inserted.
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
-- One job as the database sees it now; lease_valid is true while it is
-- running under an unexpired claim. No row (pgx.ErrNoRows) when there is no
-- job with this id. It takes no lock and writes nothing.
SELECT id, queue, kind, payload, state, priority, run_at, attempt, max_attempts,
       fence, owner, expires_at, last_error, created_at, finished_at,
       (state = 'running' AND expires_at > now())::boolean AS lease_valid
  FROM /* TEMPLATE: schema */pgfence_jobs
 WHERE id = sqlc.arg(id);
