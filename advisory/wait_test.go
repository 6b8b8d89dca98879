package advisory_test

import (
	"testing"
	"time"
)

// eventually polls cond every 10ms until it holds, and fails the test with
// what after timeout. For events the server decides the moment of (a
// terminated backend's locks going away, a waiter queueing), which the test
// cannot be told about directly.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
