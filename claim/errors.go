package claim

import (
	"errors"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/keepalive"
	"github.com/pgfence/pgfence/internal/validate"
)

var (

	// ErrShutdown is the cause of a job's context when Runner's shutdown grace
	// period ended before the job's handler returned. The job is released
	// back to the queue unless its handler still returns nil.
	ErrShutdown = errors.New("claim: worker pool shutting down")
)

func invalid(format string, args ...any) error { return validate.Invalid("claim", format, args...) }

// lostBy is the error for j's lease lost while a Runner kept it alive: at
// its local deadline, or found gone by a renewal.
func lostBy(cause keepalive.Cause, j *Job) error {
	return &pgfence.LeaseLostError{Op: "renew", JobID: j.ID, Fence: j.Fence, Cause: cause.String()}
}

// refusedWrite is the error for a write of j under op that the database
// refused: the job is no longer running under j's fence.
func refusedWrite(op string, j *Job) error {
	return &pgfence.LeaseLostError{Op: op, JobID: j.ID, Fence: j.Fence}
}
