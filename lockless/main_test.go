package lockless_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/pgfence/pgfence/internal/pgtest"
)

func TestMain(m *testing.M) {
	pgtest.Main(&leakChecked{m})
}

// leakChecked runs the package's tests and then fails if any goroutine is
// still running.
type leakChecked struct{ m *testing.M }

func (l *leakChecked) Run() int {
	before := goleak.IgnoreCurrent()
	code := l.m.Run()
	if code == 0 {
		if err := goleak.Find(before); err != nil {
			println("goroutine leak:", err.Error())
			return 1
		}
	}
	return code
}
