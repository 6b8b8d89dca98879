-- name: EnqueueInto :one
-- Inserts one job in state available, runnable at now() + $5 microseconds by
-- the database clock, into a claimer's table: written against pgfence_jobs,
-- package claim fills in its table's names and drops the optional columns it
-- lacks (queue $1, kind $2, payload $3), whose values are still bound. The
-- columns not named here get their defaults. Unless $7 is empty it notifies
-- that channel with the queue as payload, delivered when the transaction
-- commits. It never deduplicates: each call inserts a job.
WITH v AS (
  SELECT $1::text AS queue, $2::text AS kind, $3::jsonb AS payload
), ins AS (
  INSERT INTO /* TEMPLATE: table */pgfence_jobs
         (/* TEMPLATE: col */state, /* TEMPLATE: col */priority, /* TEMPLATE: col */run_at, /* TEMPLATE: col */attempt, /* TEMPLATE: col */max_attempts/* TEMPLATE_IF: queue */, /* TEMPLATE: col */queue/* TEMPLATE_END *//* TEMPLATE_IF: kind */, /* TEMPLATE: col */kind/* TEMPLATE_END *//* TEMPLATE_IF: payload */, /* TEMPLATE: col */payload/* TEMPLATE_END */)
  SELECT 'available', $4::integer, now() + $5::bigint * interval '1 microsecond', 0, $6::integer/* TEMPLATE_IF: queue */, v.queue/* TEMPLATE_END *//* TEMPLATE_IF: kind */, v.kind/* TEMPLATE_END *//* TEMPLATE_IF: payload */, v.payload/* TEMPLATE_END */
    FROM v
  RETURNING /* TEMPLATE: col */id::bigint AS id
)
SELECT ins.id, ($7::text <> '' AND pg_notify($7::text, (SELECT v.queue FROM v)) IS NULL)::boolean AS notified
  FROM ins;
