package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pgfence/pgfence/internal/validate"
	"github.com/pgfence/pgfence/pglease"
)

// held is what exec needs of what it holds while the command runs: one
// lease (a mutex lease, a permit, a shared or exclusive lease) or a key set.
type held interface {
	heldLease
	Context() context.Context
	Deadline() time.Time
	Fence() int64
	// env is the command's variables beyond PGFENCE_KEY, _FENCE and _OWNER.
	env() []string
}

// oneLease is a single lease of any kind.
type oneLease struct{ *pglease.Lease }

func (l oneLease) Err() error { return context.Cause(l.Context()) }

func (l oneLease) env() []string {
	if l.Kind() != pglease.Exclusive() {
		return []string{"PGFENCE_SLOT=" + strconv.Itoa(l.Slot())}
	}
	return nil
}

// keySet is the leases of several --key flags, taken together. Its fence,
// for PGFENCE_FENCE, is the first key's (in key order); PGFENCE_FENCES
// lists every key's, one "FENCE KEY" per line.
type keySet struct{ *pglease.KeySet }

func (s keySet) Fence() int64 { return s.Leases()[0].Fence() }
func (s keySet) Err() error   { return context.Cause(s.Context()) }

// Deadline is the earliest local deadline of the set's leases.
func (s keySet) Deadline() time.Time {
	leases := s.Leases()
	d := leases[0].Deadline()
	for _, l := range leases[1:] {
		if ld := l.Deadline(); ld.Before(d) {
			d = ld
		}
	}
	return d
}

func (s keySet) env() []string {
	var b strings.Builder
	for _, l := range s.Leases() {
		fmt.Fprintf(&b, "%d %s\n", l.Fence(), l.Key())
	}
	return []string{"PGFENCE_FENCES=" + b.String()}
}

// checkKind checks the flags that choose what kind of lease exec takes.
func (o *execOpts) checkKind() error {
	for i, k := range o.keys {
		if err := validate.Key(k); err != nil {
			return fail(exitUsage, "pgfence exec: --key %q: %v", k, err)
		}
		for _, prev := range o.keys[:i] {
			if prev == k {
				return fail(exitUsage, "pgfence exec: --key %q is given twice", k)
			}
		}
	}
	kinds := 0
	for _, set := range []bool{o.permits != 0, o.shared, o.exclusive, len(o.keys) > 1} {
		if set {
			kinds++
		}
	}
	switch {
	case kinds > 1:
		return fail(exitUsage, "pgfence exec: --permits, --shared, --exclusive and several --key exclude each other")
	case o.permits < 0 || o.permits > validate.MaxPermits:
		return fail(exitUsage, "pgfence exec: --permits %d is outside [1, %d]", o.permits, validate.MaxPermits)
	case len(o.keys) > validate.MaxSetKeys:
		return fail(exitUsage, "pgfence exec: %d keys; at most %d", len(o.keys), validate.MaxSetKeys)
	case o.holdAtLeast < 0 || o.holdAtLeast > validate.MaxTTL:
		return fail(exitUsage, "pgfence exec: --hold-at-least %v is outside [0, %v]", o.holdAtLeast, validate.MaxTTL)
	}
	return nil
}

// acquire takes what the flags ask for: waiting with --wait, else trying
// once. The minimum hold is set before the command starts.
func (o *execOpts) acquire(ctx context.Context, c *pglease.Client) (held, error) {
	wait := o.wait > 0
	var h held
	switch {
	case len(o.keys) > 1:
		take := c.TryAcquireSet
		if wait {
			take = c.AcquireSet
		}
		s, err := take(ctx, o.keys, o.ttl)
		if err != nil {
			return nil, err
		}
		if err := s.HoldAtLeast(o.holdAtLeast); err != nil {
			s.Release(ctx)
			return nil, err
		}
		return keySet{s}, nil
	default:
		take := c.TryAcquire
		if wait {
			take = c.Acquire
		}
		var err error
		if h, err = one(take(ctx, o.key, o.ttl, o.kind())); err != nil {
			return nil, err
		}
	}
	if err := h.(oneLease).HoldAtLeast(o.holdAtLeast); err != nil {
		h.Release(ctx)
		return nil, err
	}
	return h, nil
}

// kind is the kind of lease the flags ask for: --exclusive is the plain
// lease, a key's default kind.
func (o *execOpts) kind() pglease.Kind {
	switch {
	case o.permits > 0:
		return pglease.Permits(o.permits)
	case o.shared:
		return pglease.Shared()
	}
	return pglease.Exclusive()
}

func one(l *pglease.Lease, err error) (held, error) {
	if err != nil {
		return nil, err
	}
	return oneLease{l}, nil
}

// mutex reports whether exec takes one mutex lease.
func (o *execOpts) mutex() bool {
	return len(o.keys) <= 1 && o.permits == 0 && !o.shared && !o.exclusive
}
