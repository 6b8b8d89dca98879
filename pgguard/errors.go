package pgguard

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfence/pgfence/internal/pgerr"
	"github.com/pgfence/pgfence/internal/validate"
)

var (
	// ErrStaleFence: a newer holder has written the row, so the write's fence
	// is older than the row's. The error is a *StaleFenceError, which carries
	// the presented and the current fence. The caller lost its authority:
	// abandon the attempt, do not retry it with the same fence.
	ErrStaleFence = errors.New("pgguard: stale fence")

	// ErrPrecondition: the fence was good, but the row is not in the state the
	// write starts from (for example its status is no longer PENDING). The
	// error's text names the table, the key, the fence and the conditions.
	// Re-read the row to decide what to do.
	ErrPrecondition = errors.New("pgguard: precondition not met")

	// ErrAlreadyDone: the fence was good, but the work is already done: the
	// row is in a final state (see WithDoneWhen). It is a special case of
	// ErrPrecondition: the error satisfies both.
	ErrAlreadyDone = errors.New("pgguard: already done")

	// ErrNoFence: a table fenced in strict mode refused an UPDATE or DELETE
	// from a transaction that set no fence (SQLSTATE PF002), or a fenced
	// table, in either mode, refused one under a pgfence.fence that the
	// transaction did not set with pgfence_set_fence (PF003: a session-level
	// SET, or a plain set_config). See InstallTrigger and SetFence. Classify
	// turns the database's errors into ones that satisfy it.
	ErrNoFence = errors.New("pgguard: no fence set for a table fenced in strict mode")

	// ErrFenceAboveCeiling: the fence is above the highest fence pgfence's
	// source has issued so far (pgfence_fence_ceiling(): the current WAL
	// timeline over the fence sequence's last value), so it is made up or
	// corrupted: written to a row, it would lock every real holder out.
	// Refused by pgfence_set_fence, which SetFence, RunFenced and a Guard
	// call, with SQLSTATE PF004. If your fences come from a source of your
	// own, pass WithOwnFenceSource.
	ErrFenceAboveCeiling = errors.New("pgguard: fence above the highest pgfence has issued")
)

func invalid(format string, args ...any) error { return validate.Invalid("pgguard", format, args...) }

// StaleFenceError reports a write refused because a newer holder has written
// the row: each one is a paused or partitioned holder that the fence caught.
// errors.Is(err, ErrStaleFence) is true for it.
type StaleFenceError struct {
	// Table is the schema-qualified table, quoted where needed.
	Table string
	// Key is the row's key as text. It is empty when the fencing trigger
	// caught the write, because the trigger does not know which column is the
	// key.
	Key string
	// Presented is the fence the write carried.
	Presented int64
	// Current is the row's fence: the newest holder's.
	Current int64
	// Err is the database's error when the fencing trigger caught the write
	// (a *pgconn.PgError with SQLSTATE PF001), nil when a guarded write did.
	Err error
}

// Error says which fence was refused, where, and the row's current fence.
func (e *StaleFenceError) Error() string {
	where := e.Table
	if e.Key != "" {
		where = fmt.Sprintf("%s key %q", e.Table, e.Key)
	}
	by := "guarded write"
	if e.Err != nil {
		by = "fencing trigger"
	}
	return fmt.Sprintf("pgguard: stale fence %d refused by the %s on %s: the row carries fence %d from a newer holder",
		e.Presented, by, where, e.Current)
}

// Is makes errors.Is(err, ErrStaleFence) true.
func (e *StaleFenceError) Is(target error) bool { return target == ErrStaleFence }

// Unwrap returns the database's error when the trigger caught the write.
func (e *StaleFenceError) Unwrap() error { return e.Err }

// preconditionError reports a write whose fence was good but whose row was
// not in the state the write starts from: ErrPrecondition, and
// ErrAlreadyDone too when done is set.
type preconditionError struct {
	table  string // schema-qualified
	key    string // the row's key as text
	fence  int64  // the write's; it was not stale
	done   bool   // the row is in a final state: the work is done
	detail string // what was not met
}

func (e *preconditionError) Error() string {
	what := "precondition not met"
	if e.done {
		what = "already done"
	}
	return fmt.Sprintf("pgguard: %s for %s key %q (fence %d): %s", what, e.table, e.key, e.fence, e.detail)
}

func (e *preconditionError) Is(target error) bool {
	return target == ErrPrecondition || (e.done && target == ErrAlreadyDone)
}

// Classify turns the fencing trigger's errors into pgguard's: a
// *pgconn.PgError with SQLSTATE PF001 becomes a *StaleFenceError (wrapping
// it), one with PF002 or PF003 an error satisfying ErrNoFence, one with PF004
// an error satisfying ErrFenceAboveCeiling. Other errors, nil
// included, are returned unchanged. Use it on errors from your own SQL on a
// table with a fencing trigger; RunFenced and the Guard's methods already do.
func Classify(err error) error {
	var pgErr *pgconn.PgError
	if err == nil || !errors.As(err, &pgErr) {
		return err
	}
	var already *StaleFenceError
	if errors.As(err, &already) || errors.Is(err, ErrNoFence) || errors.Is(err, ErrFenceAboveCeiling) {
		return err // classified already
	}
	switch pgErr.Code {
	case pgerr.StaleFence:
		e := &StaleFenceError{Err: err}
		e.Table, e.Presented, e.Current = parseStaleDetail(pgErr.Detail)
		return e
	case pgerr.NoFence, pgerr.UnboundFence:
		return fmt.Errorf("%w: %w", ErrNoFence, err)
	case pgerr.FenceAboveCeiling:
		return fmt.Errorf("%w: %w", ErrFenceAboveCeiling, err)
	}
	return err
}

// parseStaleDetail reads the trigger's DETAIL, "table=T presented=P
// current=C", from the right: the numbers hold no space, while a quoted
// table name may ("public.\"My Jobs\"").
func parseStaleDetail(detail string) (table string, presented, current int64) {
	if i := strings.LastIndex(detail, " current="); i >= 0 {
		current, _ = strconv.ParseInt(detail[i+len(" current="):], 10, 64)
		detail = detail[:i]
	}
	if i := strings.LastIndex(detail, " presented="); i >= 0 {
		presented, _ = strconv.ParseInt(detail[i+len(" presented="):], 10, 64)
		detail = detail[:i]
	}
	table, _ = strings.CutPrefix(detail, "table=")
	return table, presented, current
}
