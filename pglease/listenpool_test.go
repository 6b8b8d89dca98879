package pglease_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// WithWakeOnRelease takes at most one listen pool, not nil, and says so.
func TestWakeOnReleaseListenPool(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	for _, c := range []struct {
		name string
		opts []pglease.Option
		want string // "" for accepted
	}{
		{"nil pool", []pglease.Option{pglease.WithWakeOnRelease(nil)}, "nil listen pool"},
		{"two pools", []pglease.Option{pglease.WithWakeOnRelease(pool, pool)}, "at most one listen pool"},
		{"a pool", []pglease.Option{pglease.WithWakeOnRelease(pool)}, ""},
		{"a pool, fair", []pglease.Option{pglease.WithFairWaiting(), pglease.WithWakeOnRelease(pool)}, ""},
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
