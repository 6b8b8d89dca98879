package pglease_test

import (
	"os"
	"testing"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// TestMain gives the package a fresh, migrated database and checks for
// leaked goroutines (pgtest.Main).
// A test that starts worker processes re-executes this binary; a worker
// talks to the parent's database and runs no tests.
func TestMain(m *testing.M) {
	if os.Getenv(semWorkerEnv) != "" {
		os.Exit(semWorkerMain())
	}
	if os.Getenv(handoffWorkerEnv) != "" {
		os.Exit(handoffWorkerMain())
	}
	pgtest.MainWithURL(m)
}
