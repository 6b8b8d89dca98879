package claim

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/pgdb"
)

// NewJob describes a job to put in the ready-made pgfence_jobs table.
type NewJob struct {
	Queue       string          // default "default"
	Kind        string          // free-form, for the handler to dispatch on
	Payload     json.RawMessage // default {}
	Priority    int32           // smaller runs first; default 0
	Delay       time.Duration   // runnable at now() + Delay by the database clock; default 0
	MaxAttempts int32           // default 25
	// Notify names a channel to notify (pg_notify, delivered at commit) so
	// that pools listening on it (WithListen) claim at once. Default: none.
	Notify string
	// Schema is the schema of pgfence_jobs (see WithSchema). Default: found
	// through the search_path.
	Schema string
}

// Enqueue inserts one job into pgfence_jobs through q (a pool, a connection
// or the caller's transaction, so that the job commits with the data that
// asked for it) and returns its id.
func Enqueue(ctx context.Context, q pgfence.DBTX, j NewJob) (int64, error) {
	if q == nil {
		return 0, invalid("nil querier")
	}
	if j.Queue == "" {
		j.Queue = "default"
	}
	if len(j.Queue) > 128 {
		return 0, invalid("queue name is %d bytes; the limit is 128", len(j.Queue))
	}
	if j.Payload == nil {
		j.Payload = json.RawMessage("{}")
	}
	if !json.Valid(j.Payload) {
		return 0, invalid("payload is not valid JSON")
	}
	if j.MaxAttempts == 0 {
		j.MaxAttempts = 25
	}
	if j.MaxAttempts < 1 {
		return 0, invalid("max attempts must be at least 1, got %d", j.MaxAttempts)
	}
	if j.Delay < 0 || j.Delay > maxRetryDelay {
		return 0, invalid("delay %v is outside [0, %v]", j.Delay, maxRetryDelay)
	}
	if j.Notify != "" {
		if err := checkIdent("notification channel", j.Notify); err != nil {
			return 0, err
		}
	}
	if j.Schema != "" {
		if err := checkIdent("schema", j.Schema); err != nil {
			return 0, err
		}
	}
	row, err := fencedb.New(pgdb.Wrap(q, j.Schema)).EnqueueJob(ctx, fencedb.EnqueueJobParams{
		NotifyChannel: j.Notify, Queue: j.Queue, Kind: j.Kind, Payload: j.Payload,
		Priority: j.Priority, DelayMicros: j.Delay.Microseconds(), MaxAttempts: j.MaxAttempts,
	})
	if err != nil {
		return 0, fmt.Errorf("claim: enqueue: %w", err)
	}
	return row.ID, nil
}
