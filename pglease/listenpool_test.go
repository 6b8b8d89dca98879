package pglease_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// WithListenPool needs a pool and WithWakeOnRelease (given before or
// after it), and says so.
func TestWithListenPoolOptions(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	for _, c := range []struct {
		name string
		opts []pglease.Option
		want string // "" for accepted
	}{
		{"nil pool", []pglease.Option{pglease.WithWakeOnRelease(), pglease.WithListenPool(nil)}, "nil listen pool"},
		{"without wake-on-release", []pglease.Option{pglease.WithListenPool(pool)}, "add WithWakeOnRelease"},
		{"fair waiting alone", []pglease.Option{pglease.WithFairWaiting(), pglease.WithListenPool(pool)}, "add WithWakeOnRelease"},
		{"before wake-on-release", []pglease.Option{pglease.WithListenPool(pool), pglease.WithWakeOnRelease()}, ""},
	} {
		cl, err := pglease.New(pool, c.opts...)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (!errors.Is(err, pgfence.ErrInvalidInput) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want pgfence.ErrInvalidInput saying %q", c.name, err, c.want)
		}
		if cl != nil {
			cl.Close()
		}
	}
}
