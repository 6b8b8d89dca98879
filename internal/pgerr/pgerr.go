package pgerr

import (
	"errors"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// pgfence's own SQLSTATEs, raised by its fencing trigger
// (pgfence_enforce_fence), pgfence_set_fence and the lease functions of the
// SQL contract (pgfence_acquire, pgfence_renew, pgfence_release), the semaphore,
// shared/exclusive and key set functions, and
// documented by pgguard and docs/sql.md.
const (
	StaleFence        = "PF001" // a newer holder has written the row
	NoFence           = "PF002" // the transaction set no fence
	UnboundFence      = "PF003" // the fence is bound to another transaction
	FenceAboveCeiling = "PF004" // the fence is above what was ever issued
	InvalidLeaseArg   = "PF005" // a lease function got a bad key, TTL, owner or fence
	StaleTransaction  = "PF006" // a lease function ran in a transaction older than its statement
	PermitsMismatch   = "PF007" // a semaphore or shared/exclusive key is held under another number of permits
	KeySetHeld        = "PF008" // a key of an all-or-nothing key set is held by another owner
)

// Code returns the SQLSTATE of the server error in err's chain, "" when
// there is none.
func Code(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// FromServer reports whether err holds the server's answer (a
// *pgconn.PgError): the statement reached PostgreSQL and failed as a whole.
func FromServer(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr)
}

// Is reports whether err's SQLSTATE is one of codes.
func Is(err error, codes ...string) bool {
	code := Code(err)
	if code == "" {
		return false
	}
	for _, c := range codes {
		if code == c {
			return true
		}
	}
	return false
}

// IsUndefined reports a missing table or function. On pgfence's own
// statements it means pgfence's migrations never ran on this database (or
// its schema is not on the search_path).
func IsUndefined(err error) bool {
	return Is(err, pgerrcode.UndefinedTable, pgerrcode.UndefinedFunction)
}

// IsPermissionDenied reports a statement refused for want of a privilege
// (42501): on pgfence's own statements, a role that is not a member of
// pgfence_client.
func IsPermissionDenied(err error) bool { return Is(err, pgerrcode.InsufficientPrivilege) }

// IsLockNotAvailable reports a lock_timeout (or NOWAIT) that expired.
func IsLockNotAvailable(err error) bool { return Is(err, pgerrcode.LockNotAvailable) }

// IsTransient reports server answers worth retrying the same statement
// for: a server that is shutting down, restarting or out of connections, a
// serialization failure or deadlock, and a lock timeout.
func IsTransient(err error) bool {
	return Is(err,
		pgerrcode.AdminShutdown, pgerrcode.CrashShutdown, pgerrcode.CannotConnectNow,
		pgerrcode.TooManyConnections,
		pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected,
		pgerrcode.LockNotAvailable)
}

// IsUnavailable reports server answers that mean no working server: a
// connection exception (class 08), an operator intervention that ends
// sessions (57P01 to 57P05: shutdown, crash, starting up, database dropped,
// idle session timeout), or too many connections.
func IsUnavailable(err error) bool {
	code := Code(err)
	return strings.HasPrefix(code, "08") || strings.HasPrefix(code, "57P") || code == pgerrcode.TooManyConnections
}

// IsDuplicate reports an object that already exists: a duplicate table,
// schema, function or other object, or a unique violation, which is what a
// CREATE TYPE of a taken name and a concurrent CREATE ... IF NOT EXISTS meet
// in the catalog.
func IsDuplicate(err error) bool {
	return Is(err, pgerrcode.UniqueViolation, pgerrcode.DuplicateTable, pgerrcode.DuplicateSchema,
		pgerrcode.DuplicateFunction, pgerrcode.DuplicateObject)
}

// IsPreparedStatementClash reports a statement that relied on a named
// prepared statement of its server session while a transaction pooler
// (PgBouncer) served another session: the name is missing there (26000) or
// already taken (42P05).
func IsPreparedStatementClash(err error) bool {
	return Is(err, pgerrcode.InvalidSQLStatementName, pgerrcode.DuplicatePreparedStatement)
}
