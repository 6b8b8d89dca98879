package fencedb_test

import (
	"testing"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// TestMain gives the package's examples a fresh, migrated database, named by
// DATABASE_URL while they run.
func TestMain(m *testing.M) { pgtest.MainWithURL(m) }
