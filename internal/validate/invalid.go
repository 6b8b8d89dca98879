package validate

import (
	"errors"
	"fmt"
)

// ErrInvalidInput is the one value behind every public package's
// ErrInvalidInput (pglease, claim, pgguard, lockless, advisory, migrations
// export it under that name), so errors.Is(err, pglease.ErrInvalidInput)
// holds whichever package refused the input.
var ErrInvalidInput = errors.New("invalid input")

// Invalid returns an error satisfying errors.Is(err, ErrInvalidInput) whose
// text is "<pkg>: invalid input: <message>": the package prefix keeps
// telling the reader who refused.
func Invalid(pkg, format string, args ...any) error {
	return &inputError{pkg: pkg, msg: fmt.Sprintf(format, args...)}
}

type inputError struct{ pkg, msg string }

func (e *inputError) Error() string { return e.pkg + ": invalid input: " + e.msg }

func (e *inputError) Unwrap() error { return ErrInvalidInput }
