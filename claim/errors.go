package claim

import (
	"errors"
	"fmt"

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

// LeaseLostError says which write was refused. It satisfies
// errors.Is(err, pgfence.ErrLeaseLost).
type LeaseLostError struct {
	Op    string // "renew", "complete", "fail", "release" or "local deadline"
	JobID int64
	Fence int64
	// Cause is why, in pglease.LeaseLostError's words, when the Runner
	// knows it: "local_deadline", or "unknown" when a renewal found the job
	// no longer running under this fence. Empty for a write the database
	// refused (Op says which): rescued, claimed again or finished.
	Cause string
}

// opLocalDeadline is LeaseLostError.Op for keepalive.LocalDeadline.
const opLocalDeadline = "local deadline"

// lostBy is the error for j's lease lost while a Runner kept it alive: at
// its local deadline, or found gone by a renewal.
func lostBy(cause keepalive.Cause, j *Job) error {
	op := "renew"
	if cause == keepalive.LocalDeadline {
		op = opLocalDeadline
	}
	return &LeaseLostError{Op: op, JobID: j.ID, Fence: j.Fence, Cause: cause.String()}
}

// Error names the job, the operation and why its lease was lost.
func (e *LeaseLostError) Error() string {
	if e.Op == opLocalDeadline {
		return fmt.Sprintf("claim: job %d (fence %d): lease lost: %s", e.JobID, e.Fence, keepalive.LocalDeadline.Reason())
	}
	return fmt.Sprintf("claim: %s job %d (fence %d): lease lost: the job is no longer running under this fence (rescued, claimed again or finished)", e.Op, e.JobID, e.Fence)
}

// Is reports pgfence.ErrLeaseLost.
func (e *LeaseLostError) Is(target error) bool { return target == pgfence.ErrLeaseLost }
