package main

import "testing"

// step runs fn as the named subtest of a story test, and stops the story
// when it fails: later steps build on the state this one leaves.
func step(t *testing.T, name string, fn func(t *testing.T)) {
	t.Helper()
	if !t.Run(name, fn) {
		t.FailNow()
	}
}
