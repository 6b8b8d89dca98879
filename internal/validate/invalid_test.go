package validate

import (
	"errors"
	"fmt"
	"testing"
)

func TestInvalid(t *testing.T) {
	err := Invalid("claim", "batch size %d is over %d", 5000, 1000)
	if got, want := err.Error(), "claim: invalid input: batch size 5000 is over 1000"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(fmt.Errorf("outer: %w", err), ErrInvalidInput) {
		t.Fatal("a wrapped Invalid error does not satisfy errors.Is(err, ErrInvalidInput)")
	}
	if errors.Is(errors.New("claim: invalid input: text alone"), ErrInvalidInput) {
		t.Fatal("errors.Is matched on text")
	}
}
