package validate

import (
	"errors"
	"fmt"
)

// ErrInvalidInput is the value behind pgfence.ErrInvalidInput, here so that
// Invalid's errors can satisfy it without importing the module's root
// package (which imports this one).
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
