package pglease

import (
	"errors"
	"fmt"
	"time"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/validate"
)

var (

	// ErrReleased is the cause of a lease's context after Release.
	ErrReleased = errors.New("pglease: lease released")

	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("pglease: client closed")

	// ErrAmbiguous: an acquisition's outcome is unknown (the connection
	// broke after the statement was sent) and the client could not find out
	// either way. The acquisition is given back in the background (each
	// statement within 5s); if that fails too, a grant that landed stays
	// held until it expires, at most TTL from now. The error's text names
	// the key and the TTL, and errors.Is and errors.As reach both the
	// attempt's error and the one that stopped the check.
	ErrAmbiguous = errors.New("pglease: acquisition outcome unknown")
)

func invalid(format string, args ...any) error { return validate.Invalid("pglease", format, args...) }

// waitError is what Acquire returns when it stops waiting: its maximum wait
// passed or its context ended while another owner held the key. It satisfies
// errors.Is(err, pgfence.ErrNotAcquired), and errors.Is(err,
// context.DeadlineExceeded) (or Canceled) when the context ended it; its
// text says how long it waited and the last transient error.
type waitError struct {
	key      string
	waited   time.Duration
	attempts int
	// cause is the context's cause when the context ended the wait, nil when
	// the maximum wait did.
	cause error
	// lastErr is the last transient error seen while retrying, if any.
	lastErr error
}

func (e *waitError) Error() string {
	msg := fmt.Sprintf("pglease: %q not acquired after waiting %v (%d attempts)", e.key, e.waited.Round(time.Millisecond), e.attempts)
	if e.cause != nil {
		msg += ": " + e.cause.Error()
	} else {
		msg += ": maximum wait reached"
	}
	if e.lastErr != nil {
		msg += "; last error: " + e.lastErr.Error()
	}
	return msg
}

func (e *waitError) Is(target error) bool { return target == pgfence.ErrNotAcquired }

// Unwrap returns the context's cause and the last transient error.
func (e *waitError) Unwrap() []error {
	var errs []error
	if e.cause != nil {
		errs = append(errs, e.cause)
	}
	if e.lastErr != nil {
		errs = append(errs, e.lastErr)
	}
	return errs
}

// ambiguousError is ErrAmbiguous for one acquisition.
type ambiguousError struct {
	key        string
	ttl        time.Duration
	err        error // why the acquisition's answer never arrived
	resolveErr error // why the follow-up could not tell
}

func (e *ambiguousError) Error() string {
	return fmt.Sprintf("pglease: acquiring %q: outcome unknown (%v), and checking failed (%v); the lease may stay held for up to %v",
		e.key, e.err, e.resolveErr, e.ttl)
}

func (e *ambiguousError) Is(target error) bool { return target == ErrAmbiguous }

func (e *ambiguousError) Unwrap() []error { return []error{e.err, e.resolveErr} }
