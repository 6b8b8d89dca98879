-- pgfence job claiming: a ready-made jobs table (package claim).
--
-- A job row is owned by one worker at a time through a per-row lease and a
-- per-row fence:
--
--   claim   : available -> running, attempt + 1, fence = pgfence_next_fence(),
--             owner, lease_until = now() + lease (all in ONE statement that
--             picks rows FOR UPDATE SKIP LOCKED in priority, run_at, id order)
--   every later write by the worker (heartbeat, complete, fail, release)
--             matches id + fence + state = 'running'; zero rows = lease lost
--   rescue  : running rows whose lease_until <= now() go back to available
--             (or to dead after max_attempts) in ONE guarded UPDATE
--
-- The fence comes from pgfence_next_fence() (migration 000001), so it never
-- repeats: a worker whose job was rescued and claimed again can never
-- complete, fail, heartbeat or release the new attempt.
--
-- States: available (waiting for run_at), running (leased), completed,
-- dead (failed max_attempts times, or its lease expired on the last attempt).

CREATE TABLE pgfence_jobs (
  id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  queue        text        NOT NULL DEFAULT 'default' CHECK (octet_length(queue) BETWEEN 1 AND 128),
  kind         text        NOT NULL DEFAULT '',
  payload      jsonb       NOT NULL DEFAULT '{}',
  state        text        NOT NULL DEFAULT 'available'
                           CHECK (state IN ('available', 'running', 'completed', 'dead')),
  priority     integer     NOT NULL DEFAULT 0,      -- smaller runs first
  run_at       timestamptz NOT NULL DEFAULT now(),  -- not claimed before this, by the database clock
  attempt      integer     NOT NULL DEFAULT 0 CHECK (attempt >= 0),
  max_attempts integer     NOT NULL DEFAULT 25 CHECK (max_attempts >= 1),
  fence        bigint,                              -- the current claim's fencing token
  owner        text,                                -- the current claim's worker label, for humans
  lease_until  timestamptz,                         -- the current claim's lease, by the database clock
  last_error   text,
  created_at   timestamptz NOT NULL DEFAULT now(),
  finished_at  timestamptz,                         -- when it became completed or dead
  CHECK (state <> 'running' OR (fence IS NOT NULL AND lease_until IS NOT NULL))
);

-- Serves the claim: WHERE queue = $1 AND state = 'available' AND run_at <= now()
-- ORDER BY priority, run_at, id. Only runnable rows are in it, so it stays
-- small however many completed rows the table keeps.
CREATE INDEX pgfence_jobs_claim_idx ON pgfence_jobs (queue, priority, run_at, id)
  WHERE state = 'available';

-- Serves the rescue: WHERE state = 'running' AND lease_until <= now().
CREATE INDEX pgfence_jobs_rescue_idx ON pgfence_jobs (lease_until)
  WHERE state = 'running';
