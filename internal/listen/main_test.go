package listen_test

import (
	"testing"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// TestMain gives the package a fresh database and checks for leaked
// goroutines (pgtest.Main).
func TestMain(m *testing.M) { pgtest.Main(m) }
