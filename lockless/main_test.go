package lockless_test

import (
	"testing"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// TestMain gives the package a fresh, migrated database and checks for
// leaked goroutines (pgtest.Main).
func TestMain(m *testing.M) { pgtest.MainWithURL(m) }
