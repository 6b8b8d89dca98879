package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	pgf "github.com/pgfence/pgfence"
)

type fakeLease struct {
	err        error // what Err returns
	releaseErr error
	released   bool
}

func (f *fakeLease) Err() error { return f.err }
func (f *fakeLease) Release(context.Context) error {
	f.released = true
	return f.releaseErr
}

// TestFinishHolding covers the exit decision once the command has ended,
// in particular the race where the wait loop saw the command's exit before
// the loss (lost == nil) and the release fails with a plain error: the
// lease's own context says it was lost, so the exit is 83, not the
// command's code.
func TestFinishHolding(t *testing.T) {
	t.Parallel()
	lostErr := &pgf.LeaseLostError{Key: "k", Fence: 7, Cause: "local_deadline"}
	unreachable := errors.New("pglease: releasing \"k\": dial tcp: connection refused")
	for _, tc := range []struct {
		name     string
		lost     error
		lease    *fakeLease
		want     int
		released bool
	}{
		{"held, released", nil, &fakeLease{}, 5, true},
		{"held, release fails transiently", nil, &fakeLease{releaseErr: unreachable}, 5, true},
		{"release finds the lease lost", nil, &fakeLease{releaseErr: lostErr}, exitLeaseLost, true},
		{"loss seen by the loop", lostErr, &fakeLease{err: lostErr}, exitLeaseLost, false},
		{"loss not seen by the loop, database unreachable", nil, &fakeLease{err: lostErr, releaseErr: unreachable}, exitLeaseLost, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			a := &app{stderr: &stderr}
			if got := a.finishHolding("job", "k", 5, tc.lost, tc.lease); got != tc.want {
				t.Fatalf("exit %d, want %d; stderr:\n%s", got, tc.want, &stderr)
			}
			if tc.lease.released != tc.released {
				t.Fatalf("released %v, want %v", tc.lease.released, tc.released)
			}
			if tc.want == exitLeaseLost && !strings.Contains(stderr.String(), "lost") {
				t.Fatalf("no word of the loss:\n%s", &stderr)
			}
		})
	}
}
