package claim

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// statements are built once per Claimer from the validated table, with every
// identifier quoted by pgx.Identifier.Sanitize. Values are always bound.
type statements struct {
	claim, renew, complete, fail, release, rescue string
	// Batched forms, used by Pool: one statement for many jobs, each row
	// still matched on id + fence + state 'running'.
	renewMany, completeMany, readBack string
}

func buildStatements(t Table) statements {
	q := func(col string) string { return pgx.Identifier{col}.Sanitize() }
	tbl := t.ident()
	id, state, prio, runAt := q(t.ID), q(t.State), q(t.Priority), q(t.RunAt)
	attempt, maxAtt, fence, owner, expires := q(t.Attempt), q(t.MaxAttempts), q(t.Fence), q(t.Owner), q(t.ExpiresAt)
	r := strings.NewReplacer(
		"{tbl}", tbl, "{id}", id, "{state}", state, "{prio}", prio, "{run_at}", runAt,
		"{attempt}", attempt, "{max}", maxAtt, "{fence}", fence, "{owner}", owner, "{expires}", expires,
	)
	var s statements

	claimQueue, rescueQueue := "", ""
	if t.Queue != "" {
		claimQueue = " AND " + q(t.Queue) + " = $4"
		rescueQueue = " AND " + q(t.Queue) + " = $2"
	}
	returning := "j.{id}::bigint AS pgf_id, j.{fence} AS pgf_fence, j.{attempt}::bigint AS pgf_attempt, " +
		"j.{max}::bigint AS pgf_max, j.{expires} AS pgf_expires, j.{prio} AS pgf_prio, j.{run_at} AS pgf_run_at"
	selected := "pgf_id, pgf_fence, pgf_attempt, pgf_max, pgf_expires"
	if t.Payload != "" {
		returning += ", to_jsonb(j." + q(t.Payload) + ") AS pgf_payload"
		selected += ", pgf_payload"
	}
	s.claim = r.Replace(`WITH picked AS (
  SELECT {id} FROM {tbl}
   WHERE {state} = 'available' AND {run_at} <= now()` + claimQueue + `
   ORDER BY {prio}, {run_at}, {id}
   LIMIT $1
   FOR UPDATE SKIP LOCKED
)
, claimed AS (
  UPDATE {tbl} AS j
     SET {state} = 'running',
         {attempt} = j.{attempt} + 1,
         {fence} = pgfence_next_fence(),
         {owner} = $2,
         {expires} = now() + $3::bigint * interval '1 microsecond'
    FROM picked, (SELECT set_config('synchronous_commit', 'on', true)) AS settings
   WHERE j.{id} = picked.{id}
  RETURNING ` + returning + `
)
SELECT ` + selected + ` FROM claimed ORDER BY pgf_prio, pgf_run_at, pgf_id`)

	s.renew = r.Replace(`UPDATE {tbl}
   SET {expires} = now() + $3::bigint * interval '1 microsecond'
 WHERE {id} = $1 AND {fence} = $2 AND {state} = 'running' AND {expires} > now()
RETURNING {expires}`)

	finished := ""
	if t.FinishedAt != "" {
		finished = ", " + q(t.FinishedAt) + " = now()"
	}
	s.complete = r.Replace(`WITH upd AS (
  UPDATE {tbl} SET {state} = 'completed'` + finished + `
   WHERE {id} = $1 AND {fence} = $2 AND {state} = 'running'
  RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM upd)
    OR EXISTS (SELECT 1 FROM {tbl} WHERE {id} = $1 AND {fence} = $2 AND {state} = 'completed')`)

	// The batch forms take parallel arrays of ids and fences. The
	// completion forces a durable commit whatever the session's
	// synchronous_commit: Runner reports a job completed only once its
	// completion is durable. Each statement returns the id + fence pairs it
	// changed (a batch may hold two attempts of one job: a stale worker's and
	// the new one's); a job missing from the answer was not changed (lease
	// lost).
	s.renewMany = r.Replace(`UPDATE {tbl} AS j
   SET {expires} = now() + $3::bigint * interval '1 microsecond'
  FROM unnest($1::bigint[], $2::bigint[]) AS x(id, fence)
 WHERE j.{id} = x.id AND j.{fence} = x.fence AND j.{state} = 'running' AND j.{expires} > now()
RETURNING j.{id}::bigint, j.{fence}, j.{expires}`)

	s.completeMany = r.Replace(`UPDATE {tbl} AS j SET {state} = 'completed'` + finished + `
  FROM unnest($1::bigint[], $2::bigint[]) AS x(id, fence),
       (SELECT set_config('synchronous_commit', 'on', true)) AS settings
 WHERE j.{id} = x.id AND j.{fence} = x.fence AND j.{state} = 'running'
RETURNING j.{id}::bigint, j.{fence}`)

	// readBack settles an ambiguous completion: for each id + fence still
	// on its row, the row's state. FOR UPDATE waits until a transaction
	// that still holds the row (the one whose answer was lost, if its
	// backend lives) ends, so the state read is its final word.
	s.readBack = r.Replace(`SELECT j.{id}::bigint, j.{fence}, j.{state}::text
  FROM {tbl} AS j
  JOIN unnest($1::bigint[], $2::bigint[]) AS x(id, fence) ON j.{id} = x.id AND j.{fence} = x.fence
   FOR UPDATE OF j`)

	extra := ""
	if t.LastError != "" {
		extra += ", " + q(t.LastError) + " = NULLIF($4::text, '')"
	}
	if t.FinishedAt != "" {
		extra += ", " + q(t.FinishedAt) + " = CASE WHEN j.{attempt} >= j.{max} THEN now() ELSE j." + q(t.FinishedAt) + " END"
	}
	s.fail = r.Replace(`UPDATE {tbl} AS j
   SET {state} = CASE WHEN j.{attempt} >= j.{max} THEN 'dead' ELSE 'available' END,
       {run_at} = CASE WHEN j.{attempt} >= j.{max} THEN j.{run_at}
                       ELSE now() + $3::bigint * interval '1 microsecond' END` + extra + `
 WHERE j.{id} = $1 AND j.{fence} = $2 AND j.{state} = 'running'
RETURNING j.{state}::text, j.{run_at}`)

	s.release = r.Replace(`UPDATE {tbl}
   SET {state} = 'available', {attempt} = GREATEST({attempt} - 1, 0)
 WHERE {id} = $1 AND {fence} = $2 AND {state} = 'running'`)

	extra = ""
	if t.LastError != "" {
		extra += ", " + q(t.LastError) + " = 'lease expired (owner ' || coalesce(j.{owner}::text, '') || ', fence ' || coalesce(j.{fence}::text, '') || ')'"
	}
	if t.FinishedAt != "" {
		extra += ", " + q(t.FinishedAt) + " = CASE WHEN j.{attempt} >= j.{max} THEN now() ELSE j." + q(t.FinishedAt) + " END"
	}
	s.rescue = r.Replace(`WITH rescued AS (
  UPDATE {tbl} AS j
     SET {state} = CASE WHEN j.{attempt} >= j.{max} THEN 'dead' ELSE 'available' END,
         {run_at} = CASE WHEN j.{attempt} >= j.{max} THEN j.{run_at} ELSE now() END` + extra + `
   WHERE j.{id} IN (SELECT {id} FROM {tbl}
                     WHERE {state} = 'running' AND {expires} <= now()` + rescueQueue + `
                     ORDER BY {expires}
                     LIMIT $1
                     FOR UPDATE SKIP LOCKED)
     AND j.{state} = 'running' AND j.{expires} <= now()
  RETURNING j.{state}::text AS new_state
)
SELECT count(*) FILTER (WHERE new_state = 'available'), count(*) FILTER (WHERE new_state = 'dead')
  FROM rescued`)
	return s
}
