package claim

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/fencesql"
	"github.com/pgfence/pgfence/internal/pgdb"
)

// NewJob describes a job to put in a Claimer's table.
type NewJob struct {
	// Queue is the job's queue, for a table with a queue column. Default:
	// the claimer's (WithQueue).
	Queue    string
	Kind     string          // free-form, for the handler to dispatch on; needs a kind column
	Payload  json.RawMessage // default {} where the table has a payload column
	Priority int32           // smaller runs first; default 0
	Delay    time.Duration   // runnable at now() + Delay by the database clock; default 0
	// MaxAttempts: default 25.
	MaxAttempts int32
	// Notify names a channel to notify (pg_notify, delivered at commit) so
	// that pools listening on it (WithListen) claim at once. Default: none.
	Notify string
}

// enqueueStatement is Enqueue's statement on t, with pgfence's functions in
// schema.
func enqueueStatement(t Table, schema string) (string, error) {
	names := t.names()
	names.Schema = schema
	sql, err := expand(fencesql.EnqueueInto, names)
	if err != nil {
		return "", fmt.Errorf("claim: building the enqueue statement for table %s: %w", t.ident(), err)
	}
	return sql, nil
}

// Enqueue inserts one job into the claimer's table (the one it claims from,
// in its schema) through db (a pool, a connection or the caller's
// transaction, so that the job commits with the data that asked for it) and
// returns its id. A Queue, Kind or Payload for a table without that column
// is refused with pgfence.ErrInvalidInput rather than dropped.
func (c *Claimer) Enqueue(ctx context.Context, db pgfence.DBTX, j NewJob) (int64, error) {
	if err := c.checkNewJob(db, &j); err != nil {
		return 0, err
	}
	var id int64
	var notified bool
	err := pgdb.Wrap(db, "").QueryRow(ctx, c.enqueue, j.Queue, j.Kind, j.Payload, j.Priority,
		j.Delay.Microseconds(), j.MaxAttempts, j.Notify).Scan(&id, &notified)
	if err != nil {
		return 0, c.explain("enqueue", err)
	}
	return id, nil
}

// checkNewJob checks j against the claimer's table and fills in its
// defaults.
func (c *Claimer) checkNewJob(db pgfence.DBTX, j *NewJob) error {
	t := c.cfg.table
	switch {
	case db == nil:
		return invalid("nil querier")
	case j.Queue != "" && t.Queue == "":
		return invalid("table %s has no queue column for queue %q", t.ident(), j.Queue)
	case j.Kind != "" && t.Kind == "":
		return invalid("table %s has no kind column for kind %q", t.ident(), j.Kind)
	case j.Payload != nil && t.Payload == "":
		return invalid("table %s has no payload column for the payload", t.ident())
	}
	if j.Queue == "" {
		j.Queue = c.cfg.queue
	}
	if len(j.Queue) > 128 {
		return invalid("queue name is %d bytes; the limit is 128", len(j.Queue))
	}
	if j.Payload == nil {
		j.Payload = json.RawMessage("{}")
	}
	if !json.Valid(j.Payload) {
		return invalid("payload is not valid JSON")
	}
	if j.MaxAttempts == 0 {
		j.MaxAttempts = 25
	}
	if j.MaxAttempts < 1 {
		return invalid("max attempts must be at least 1, got %d", j.MaxAttempts)
	}
	if j.Delay < 0 || j.Delay > maxRetryDelay {
		return invalid("delay %v is outside [0, %v]", j.Delay, maxRetryDelay)
	}
	if j.Notify != "" {
		return checkIdent("notification channel", j.Notify)
	}
	return nil
}
