package pgdb

import "errors"

// NotSentError is a failure to take a pool connection: the statement was
// not sent.
type NotSentError struct{ Err error }

func (e *NotSentError) Error() string { return "no connection from the pool: " + e.Err.Error() }
func (e *NotSentError) Unwrap() error { return e.Err }

// NotSent reports whether err says that its statement was never sent.
func NotSent(err error) bool {
	var e *NotSentError
	return errors.As(err, &e)
}
