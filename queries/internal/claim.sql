-- name: ClaimJobs :many
-- Claims up to $1 runnable jobs for owner $2 with a lease of $3
-- microseconds (of queue $4), in claim order. It commits durably whatever the
-- session's synchronous_commit: a claim lost in a crash could see its fence
-- issued again. So each row's fence is the bare draw (pgfence_draw_fence),
-- as the lease acquisition's: the statement writes the rows it claims and
-- forces its own durable commit, which flushes the WAL past the sequence's
-- record; pgfence_next_fence's per-row checks for that would be redundant.
WITH picked AS (
  SELECT /* TEMPLATE: col */id FROM /* TEMPLATE: table */pgfence_jobs AS p
   WHERE /* TEMPLATE: col */state = 'available' AND /* TEMPLATE: col */run_at <= now()/* TEMPLATE_IF: queue */ AND p./* TEMPLATE: col */queue = $4/* TEMPLATE_END */
   ORDER BY /* TEMPLATE: col */priority, /* TEMPLATE: col */run_at, /* TEMPLATE: col */id
   LIMIT $1
   FOR UPDATE SKIP LOCKED
)
, claimed AS (
  UPDATE /* TEMPLATE: table */pgfence_jobs AS j
     SET /* TEMPLATE: col */state = 'running',
         /* TEMPLATE: col */attempt = j./* TEMPLATE: col */attempt + 1,
         /* TEMPLATE: col */fence = /* TEMPLATE: schema */pgfence_draw_fence(),
         /* TEMPLATE: col */owner = $2,
         /* TEMPLATE: col */expires_at = now() + $3::bigint * interval '1 microsecond'
    FROM picked, (SELECT set_config('synchronous_commit', 'on', true)) AS settings
   WHERE j./* TEMPLATE: col */id = picked./* TEMPLATE: col */id
  RETURNING j./* TEMPLATE: col */id::bigint AS pgf_id, j./* TEMPLATE: col */fence AS pgf_fence, j./* TEMPLATE: col */attempt::bigint AS pgf_attempt, j./* TEMPLATE: col */max_attempts::bigint AS pgf_max, j./* TEMPLATE: col */expires_at AS pgf_expires, j./* TEMPLATE: col */priority AS pgf_prio, j./* TEMPLATE: col */run_at AS pgf_run_at/* TEMPLATE_IF: payload */, to_jsonb(j./* TEMPLATE: col */payload) AS pgf_payload/* TEMPLATE_END *//* TEMPLATE_IF: kind */, COALESCE(j./* TEMPLATE: col */kind::text, '') AS pgf_kind/* TEMPLATE_END */
)
SELECT pgf_id, pgf_fence, pgf_attempt, pgf_max, pgf_expires/* TEMPLATE_IF: payload */, pgf_payload/* TEMPLATE_END *//* TEMPLATE_IF: kind */, pgf_kind/* TEMPLATE_END */ FROM claimed ORDER BY pgf_prio, pgf_run_at, pgf_id;

-- name: RenewJob :one
-- Extends job $1's lease (fence $2) to now() + $3 microseconds, only while
-- it is unexpired: it never resurrects a lease that a rescue may have taken.
UPDATE /* TEMPLATE: table */pgfence_jobs
   SET /* TEMPLATE: col */expires_at = now() + $3::bigint * interval '1 microsecond'
 WHERE /* TEMPLATE: col */id = $1 AND /* TEMPLATE: col */fence = $2 AND /* TEMPLATE: col */state = 'running' AND /* TEMPLATE: col */expires_at > now()
RETURNING /* TEMPLATE: col */expires_at;

-- name: CompleteJob :one
-- Completes job $1 under fence $2; true also when it is already completed
-- under that fence (a retry after a lost answer) as of the statement's
-- snapshot. That snapshot is taken before the UPDATE waits for the row lock,
-- so a retry queued behind the completing transaction answers false: on
-- false, claim reads the row back in a new statement (ReadBackJobs).
WITH upd AS (
  UPDATE /* TEMPLATE: table */pgfence_jobs SET /* TEMPLATE: col */state = 'completed'/* TEMPLATE_IF: finished_at */, /* TEMPLATE: col */finished_at = now()/* TEMPLATE_END */
   WHERE /* TEMPLATE: col */id = $1 AND /* TEMPLATE: col */fence = $2 AND /* TEMPLATE: col */state = 'running'
  RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM upd)
    OR EXISTS (SELECT 1 FROM /* TEMPLATE: table */pgfence_jobs AS k WHERE k./* TEMPLATE: col */id = $1 AND k./* TEMPLATE: col */fence = $2 AND k./* TEMPLATE: col */state = 'completed');

-- name: RenewJobs :many
-- Renew for every job $1[i] under fence $2[i]. This and the other batch forms
-- return the id + fence pairs they changed (a batch may hold two attempts of
-- one job: a stale worker's and the new one's); a job missing from the answer
-- was not changed (lease lost).
UPDATE /* TEMPLATE: table */pgfence_jobs AS j
   SET /* TEMPLATE: col */expires_at = now() + $3::bigint * interval '1 microsecond'
  FROM ROWS FROM (unnest($1::bigint[]), unnest($2::bigint[])) AS x(id, fence)
 WHERE j./* TEMPLATE: col */id = x.id AND j./* TEMPLATE: col */fence = x.fence AND j./* TEMPLATE: col */state = 'running' AND j./* TEMPLATE: col */expires_at > now()
RETURNING j./* TEMPLATE: col */id::bigint, j./* TEMPLATE: col */fence, j./* TEMPLATE: col */expires_at;

-- name: CompleteJobs :many
-- Complete for every job $1[i] under fence $2[i]. It forces a durable commit
-- whatever the session's synchronous_commit: Runner reports a job completed
-- only once its completion is durable.
UPDATE /* TEMPLATE: table */pgfence_jobs AS j SET /* TEMPLATE: col */state = 'completed'/* TEMPLATE_IF: finished_at */, /* TEMPLATE: col */finished_at = now()/* TEMPLATE_END */
  FROM ROWS FROM (unnest($1::bigint[]), unnest($2::bigint[])) AS x(id, fence),
       (SELECT set_config('synchronous_commit', 'on', true)) AS settings
 WHERE j./* TEMPLATE: col */id = x.id AND j./* TEMPLATE: col */fence = x.fence AND j./* TEMPLATE: col */state = 'running'
RETURNING j./* TEMPLATE: col */id::bigint, j./* TEMPLATE: col */fence;

-- name: ReadBackJobs :many
-- Settles an ambiguous completion: for each id + fence still on its row, the
-- row's state. FOR UPDATE waits until a transaction that still holds the row
-- (the one whose answer was lost, if its backend lives) ends, so the state
-- read is its final word.
SELECT j./* TEMPLATE: col */id::bigint, j./* TEMPLATE: col */fence, j./* TEMPLATE: col */state::text
  FROM /* TEMPLATE: table */pgfence_jobs AS j
  JOIN ROWS FROM (unnest($1::bigint[]), unnest($2::bigint[])) AS x(id, fence) ON j./* TEMPLATE: col */id = x.id AND j./* TEMPLATE: col */fence = x.fence
   FOR UPDATE OF j;

-- name: FailJob :one
-- Records a failed attempt of job $1 under fence $2: available again at
-- now() + $3 microseconds, or dead after its last attempt; $4 is the error
-- text ('' for none).
UPDATE /* TEMPLATE: table */pgfence_jobs AS j
   SET /* TEMPLATE: col */state = CASE WHEN j./* TEMPLATE: col */attempt >= j./* TEMPLATE: col */max_attempts THEN 'dead' ELSE 'available' END,
       /* TEMPLATE: col */run_at = CASE WHEN j./* TEMPLATE: col */attempt >= j./* TEMPLATE: col */max_attempts THEN j./* TEMPLATE: col */run_at
                       ELSE now() + $3::bigint * interval '1 microsecond' END/* TEMPLATE_IF: last_error */, /* TEMPLATE: col */last_error = NULLIF($4::text, '')/* TEMPLATE_END *//* TEMPLATE_IF: finished_at */, /* TEMPLATE: col */finished_at = CASE WHEN j./* TEMPLATE: col */attempt >= j./* TEMPLATE: col */max_attempts THEN now() ELSE j./* TEMPLATE: col */finished_at END/* TEMPLATE_END */
 WHERE j./* TEMPLATE: col */id = $1 AND j./* TEMPLATE: col */fence = $2 AND j./* TEMPLATE: col */state = 'running'
RETURNING j./* TEMPLATE: col */state::text, j./* TEMPLATE: col */run_at;

-- name: ReleaseJob :execrows
-- Gives job $1 (fence $2) back to the queue without counting the attempt.
UPDATE /* TEMPLATE: table */pgfence_jobs
   SET /* TEMPLATE: col */state = 'available', /* TEMPLATE: col */attempt = GREATEST(/* TEMPLATE: col */attempt - 1, 0)
 WHERE /* TEMPLATE: col */id = $1 AND /* TEMPLATE: col */fence = $2 AND /* TEMPLATE: col */state = 'running';

-- name: RescueJobs :one
-- Returns up to $1 running jobs (of queue $2) whose lease expired to the
-- queue, or makes them dead after their last attempt; counts both.
WITH rescued AS (
  UPDATE /* TEMPLATE: table */pgfence_jobs AS j
     SET /* TEMPLATE: col */state = CASE WHEN j./* TEMPLATE: col */attempt >= j./* TEMPLATE: col */max_attempts THEN 'dead' ELSE 'available' END,
         /* TEMPLATE: col */run_at = CASE WHEN j./* TEMPLATE: col */attempt >= j./* TEMPLATE: col */max_attempts THEN j./* TEMPLATE: col */run_at ELSE now() END/* TEMPLATE_IF: last_error */, /* TEMPLATE: col */last_error = 'lease expired (owner ' || coalesce(j./* TEMPLATE: col */owner::text, '') || ', fence ' || coalesce(j./* TEMPLATE: col */fence::text, '') || ')'/* TEMPLATE_END *//* TEMPLATE_IF: finished_at */, /* TEMPLATE: col */finished_at = CASE WHEN j./* TEMPLATE: col */attempt >= j./* TEMPLATE: col */max_attempts THEN now() ELSE j./* TEMPLATE: col */finished_at END/* TEMPLATE_END */
   WHERE j./* TEMPLATE: col */id IN (SELECT r./* TEMPLATE: col */id FROM /* TEMPLATE: table */pgfence_jobs AS r
                     WHERE r./* TEMPLATE: col */state = 'running' AND r./* TEMPLATE: col */expires_at <= now()/* TEMPLATE_IF: queue */ AND r./* TEMPLATE: col */queue = $2/* TEMPLATE_END */
                     ORDER BY r./* TEMPLATE: col */expires_at
                     LIMIT $1
                     FOR UPDATE SKIP LOCKED)
     AND j./* TEMPLATE: col */state = 'running' AND j./* TEMPLATE: col */expires_at <= now()
  RETURNING j./* TEMPLATE: col */state::text AS new_state
)
SELECT count(*) FILTER (WHERE new_state = 'available') AS requeued, count(*) FILTER (WHERE new_state = 'dead') AS dead
  FROM rescued;

-- name: SweepFinishedJobsBatch :one
-- One batch of claim's SweepFinished: reads the next $2 rows in id order after $1 (a
-- cursor on the unique, so indexed, id) and deletes those (of queue $4)
-- finished more than $3 microseconds ago, re-checking on the newest row
-- version. Returns the rows read (fewer than $2: the walk is done), the last
-- id read (the next cursor) and the rows deleted. It commits asynchronously:
-- a delete lost in a crash leaves a finished job that the next sweep deletes.
WITH batch AS (
  SELECT /* TEMPLATE: col */id, /* TEMPLATE: col */state, /* TEMPLATE: col */finished_at/* TEMPLATE_IF: queue */, /* TEMPLATE: col */queue/* TEMPLATE_END */ FROM /* TEMPLATE: table */pgfence_jobs WHERE /* TEMPLATE: col */id > $1::bigint ORDER BY /* TEMPLATE: col */id LIMIT $2::int
), deleted AS (
  DELETE FROM /* TEMPLATE: table */pgfence_jobs
   WHERE /* TEMPLATE: col */id = ANY (ARRAY(SELECT /* TEMPLATE: col */id FROM batch WHERE /* TEMPLATE: col */state IN ('completed', 'dead') AND /* TEMPLATE: col */finished_at < now() - $3::bigint * interval '1 microsecond'/* TEMPLATE_IF: queue */ AND /* TEMPLATE: col */queue = $4::text/* TEMPLATE_END */))
     AND /* TEMPLATE: col */state IN ('completed', 'dead') AND /* TEMPLATE: col */finished_at < now() - $3::bigint * interval '1 microsecond'/* TEMPLATE_IF: queue */ AND /* TEMPLATE: col */queue = $4/* TEMPLATE_END */
  RETURNING 1
)
SELECT (SELECT count(*) FROM batch)::bigint AS scanned,
       COALESCE((SELECT max(/* TEMPLATE: col */id) FROM batch), 0)::bigint AS last_id,
       (SELECT count(*) FROM deleted)::bigint AS deleted
 WHERE set_config('synchronous_commit', 'off', true) = 'off';

-- name: JobQueueStats :one
-- The queue's available and running rows and the age in seconds of its
-- oldest runnable one (0 when none is), for claim's metrics. Completed and
-- dead rows are left out: they accumulate, and counting them would scan what
-- the partial indexes on available and running rows avoid.
SELECT count(*) FILTER (WHERE /* TEMPLATE: col */state = 'available') AS available,
       count(*) FILTER (WHERE /* TEMPLATE: col */state = 'running') AS running,
       coalesce(extract(epoch FROM now() - min(/* TEMPLATE: col */run_at) FILTER (WHERE /* TEMPLATE: col */state = 'available' AND /* TEMPLATE: col */run_at <= now())), 0)::float8 AS oldest_runnable_age
  FROM /* TEMPLATE: table */pgfence_jobs
 WHERE /* TEMPLATE: col */state IN ('available', 'running')/* TEMPLATE_IF: queue */ AND /* TEMPLATE: col */queue = $1/* TEMPLATE_END */;

-- About this file (here at its end: sqlc would make a comment at the top the
-- first statement's doc). These are the statements package claim sends,
-- written against the ready-made table pgfence_jobs so that sqlc checks them
-- against its schema. For a table of the user's own (claim.WithTable),
-- internal/sqltmpl puts that table's names at the places the TEMPLATE markers
-- (block comments) mark, and keeps a TEMPLATE_IF section only when the table
-- has that optional column (queue, last_error, finished_at, payload).
-- Parameters are positional ($n, not sqlc.arg) so that an optional section
-- always holds the highest ones: dropping it leaves $1..$k. A few columns
-- compared with a parameter carry their table's alias (p., r., k.) or the
-- parameter a cast, where sqlc would otherwise find the column ambiguous.
-- Every write after the claim matches its row on id + fence + state 'running'.
