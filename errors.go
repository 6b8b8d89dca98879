package pgfence

import (
	"errors"
	"fmt"

	"github.com/pgfence/pgfence/internal/keepalive"
	"github.com/pgfence/pgfence/internal/validate"
)

var (
	// ErrNotAcquired: another owner holds the key (a pglease lease) or the
	// lock (an advisory lock). The packages' try-calls return it at once;
	// pglease's Acquire returns an error satisfying it, saying how long it
	// waited, when it gives up. Nothing was granted.
	ErrNotAcquired = errors.New("pgfence: held by another owner")

	// ErrLeaseLost: a lease (pglease) or a job row's lease (claim) expired
	// by the database clock, another owner took it, or the local deadline
	// passed without a successful renewal. Stop starting protected side
	// effects; anything already sent may still happen, which is why the
	// resource must check the fence. The errors returned for it are
	// *LeaseLostError, which say which lease and why.
	ErrLeaseLost = errors.New("pgfence: lease lost")

	// ErrConflict: a write found the row other than the caller expected it:
	// at another version (lockless, as a *lockless.ConflictError), or an
	// intent recorded with other values under the same id (payouts).
	// Nothing was written.
	ErrConflict = errors.New("pgfence: conflict")

	// ErrNotFound: no row has the given key (pgguard's guarded writes,
	// lockless's counters). Nothing was written.
	ErrNotFound = errors.New("pgfence: no such row")

	// ErrInvalidInput: a key, TTL, name or option was refused before
	// anything was sent to the database. The error's text says which and
	// why.
	ErrInvalidInput = validate.ErrInvalidInput
)

// LeaseLostError is the error for a lost lease, as pglease returns it for a
// lease (Key) and claim for a job row's lease (JobID): the cause of the
// lease's or the job's context, and what a write under a lease that is gone
// returns. It satisfies errors.Is(err, ErrLeaseLost).
type LeaseLostError struct {
	Key   string // the pglease lease's key; "" for a job
	JobID int64  // the claim job's id; 0 for a pglease lease
	Fence int64
	// Op is the claim call that found the job's lease gone: "renew",
	// "complete", "fail" or "release"; "" for a pglease lease.
	Op string
	// Cause is why, in the words of the metrics pgfence.lease.lost and
	// pgfence.job.lease_lost: "expired" or "taken_over" (found by pglease's
	// Release), "local_deadline", "release_failed", or "unknown" (a renewal
	// found the lease gone: the context ends at once, without a read to tell
	// expired from taken over); "released" when a pglease lease is renewed
	// after its Release. Empty for a claim write the database refused (Op
	// says which): the job was rescued, claimed again or finished.
	Cause string
}

// Error names the lease or job, the fence and why the lease was lost.
func (e *LeaseLostError) Error() string {
	if e.Key != "" || e.JobID == 0 {
		return fmt.Sprintf("pgfence: lease lost: %q (fence %d): %s", e.Key, e.Fence, e.reason())
	}
	op := ""
	if e.Op != "" {
		op = e.Op + " "
	}
	return fmt.Sprintf("pgfence: %sjob %d (fence %d): lease lost: %s", op, e.JobID, e.Fence, e.reason())
}

// reason is Cause in words.
func (e *LeaseLostError) reason() string {
	switch e.Cause {
	case "":
		return "the job is no longer running under this fence (rescued, claimed again or finished)"
	case "released":
		return "it was released"
	}
	for c := keepalive.Cause(0); c < keepalive.NumCauses; c++ {
		if c.String() == e.Cause {
			return c.Reason()
		}
	}
	return e.Cause
}

// Is reports ErrLeaseLost.
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }
