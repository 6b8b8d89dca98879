package pgdb_test

import (
	"testing"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
