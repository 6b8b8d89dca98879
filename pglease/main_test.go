package pglease_test

import (
	"os"
	"testing"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// TestMain gives the package a fresh, migrated database and checks for
// leaked goroutines (pgtest.Main).
//
// Tests call t.Parallel unless they need to run alone: they time leases,
// renewals or waits closely (a busy neighbour delays a renewal past a short
// lease), count or sweep a whole table of the default schema or
// pg_stat_activity, kill backends, start clusters or processes, or count
// allocations. Go runs every such serial test, one at a time, before the
// parallel ones go on. A test that sweeps or counts whole tables runs in
// parallel only in a schema of its own (pgtest.Schema).
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
