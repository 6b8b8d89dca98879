package pgfence

import (
	"errors"

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
	// *pglease.LeaseLostError or *claim.LeaseLostError, which say which lease
	// and why.
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
