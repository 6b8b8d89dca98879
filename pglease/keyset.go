package pglease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfence/pgfence/internal/fencesql"
	"github.com/pgfence/pgfence/internal/pgerr"
)

// MaxSetKeys is the largest number of keys in one key set.
const MaxSetKeys = 64

// KeySet is the mutex leases of several keys, taken together in one
// statement: all granted, each with its own fence, or none. Each is a
// *Lease (renewed, lost and released as any); the set's Context ends when
// any of them ends, and Release gives them all back.
type KeySet struct {
	leases []*Lease // in key order
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// TryAcquireSet takes the mutex leases of keys for ttl, all or none: when
// any key is held by another owner it returns ErrNotAcquired at once (its
// text names the held keys) and takes none. Two callers asking for
// overlapping sets, in any order, never deadlock: the keys are taken in
// key order, each wait bounded. The keys must be distinct, 1 to
// MaxSetKeys of them.
func (c *Client) TryAcquireSet(ctx context.Context, keys []string, ttl time.Duration) (*KeySet, error) {
	sorted, err := c.checkSet(keys, ttl)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	s, err := c.trySet(ctx, sorted, ttl)
	c.met.acquired(opTry, start, err)
	return s, err
}

// AcquireSet takes the mutex leases of keys, all or none, waiting as
// Acquire waits while any of them is held.
func (c *Client) AcquireSet(ctx context.Context, keys []string, ttl time.Duration) (*KeySet, error) {
	sorted, err := c.checkSet(keys, ttl)
	if err != nil {
		return nil, err
	}
	var set *KeySet
	_, err = c.waitFor(ctx, strings.Join(sorted, ","), sorted[0], func(ctx context.Context) (*Lease, error) {
		s, err := c.trySet(ctx, sorted, ttl)
		if err != nil {
			return nil, err
		}
		set = s
		return s.leases[0], nil
	})
	if err != nil {
		return nil, err
	}
	return set, nil
}

// checkSet validates keys and ttl and returns the keys sorted.
func (c *Client) checkSet(keys []string, ttl time.Duration) ([]string, error) {
	if len(keys) == 0 || len(keys) > MaxSetKeys {
		return nil, invalid("a key set needs 1 to %d keys, got %d", MaxSetKeys, len(keys))
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	for i, k := range sorted {
		if err := c.checkArgs(k, ttl); err != nil {
			return nil, err
		}
		if i > 0 && k == sorted[i-1] {
			return nil, invalid("key %q appears twice in the key set", k)
		}
	}
	return sorted, nil
}

func (c *Client) trySet(ctx context.Context, keys []string, ttl time.Duration) (*KeySet, error) {
	token := newToken()
	sent := time.Now()
	rows, err := c.own(ctx).AcquireKeySet(ctx, fencesql.AcquireKeySetParams{
		LockKeys: keys, Owner: c.cfg.owner, OwnerToken: token, TtlMicros: ttl.Microseconds()})
	var pe *pgconn.PgError
	switch {
	case err == nil && len(rows) == len(keys):
		return c.startSet(token, rows, ttl, sent)
	case err == nil: // no row: the token was abandoned (never for a new token)
		return nil, fmt.Errorf("%w: key set %q", ErrNotAcquired, keys)
	case errors.As(err, &pe) && pe.Code == pgerr.KeySetHeld:
		c.stats.notAcquired.Add(1)
		return nil, fmt.Errorf("%w: %s", ErrNotAcquired, strings.TrimPrefix(pe.Message, "pgfence: "))
	case pgerr.IsLockNotAvailable(err):
		c.stats.notAcquired.Add(1)
		return nil, fmt.Errorf("%w: key set %q (another acquisition was in progress)", ErrNotAcquired, keys)
	case mayHaveExecuted(err):
		c.stats.ambiguous.Add(1)
		return c.resolveSet(ctx, keys, token, ttl, sent, err)
	default:
		return nil, c.explain(strings.Join(keys, ","), err)
	}
}

// resolveSet settles a key set acquisition whose answer was lost: a caller
// still waiting adopts the set if every key was granted under token;
// otherwise every key is abandoned as a single acquisition's would be.
func (c *Client) resolveSet(ctx context.Context, keys []string, token string, ttl time.Duration, sent time.Time, cause error) (*KeySet, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.resolveWait)
	defer cancel()
	if ctx.Err() == nil {
		var rows []fencesql.AcquireKeySetRow
		for _, k := range keys {
			r, err := c.own(rctx).FindByOwnerToken(rctx, fencesql.FindByOwnerTokenParams{LockKey: k, OwnerToken: token})
			if errors.Is(err, pgx.ErrNoRows) {
				break
			}
			if err != nil {
				return nil, &AmbiguousError{Key: strings.Join(keys, ","), TTL: ttl, Err: cause, ResolveErr: err}
			}
			rows = append(rows, fencesql.AcquireKeySetRow{LockKey: k, Fence: r.Fence, ExpiresAt: r.ExpiresAt})
		}
		if len(rows) == len(keys) {
			return c.startSet(token, rows, ttl, sent)
		}
	}
	for _, k := range keys {
		if _, err := c.abandon(rctx, k, token); err != nil {
			return nil, &AmbiguousError{Key: strings.Join(keys, ","), TTL: ttl, Err: cause, ResolveErr: err}
		}
	}
	c.recheckLater(keys[0], token, len(keys))
	return nil, fmt.Errorf("pglease: acquiring key set %q: no answer from the server, and the leases were not kept: %w", keys, cause)
}

// startSet turns a granted set's rows into leases and the set.
func (c *Client) startSet(token string, rows []fencesql.AcquireKeySetRow, ttl time.Duration, sent time.Time) (*KeySet, error) {
	slices.SortFunc(rows, func(a, b fencesql.AcquireKeySetRow) int { return strings.Compare(a.LockKey, b.LockKey) })
	s := &KeySet{}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	for i, r := range rows {
		l, err := c.startLease(r.LockKey, token, r.Fence, r.ExpiresAt, ttl, sent)
		if err != nil { // closed meanwhile: startLease gave this one back
			for _, r := range rows[i+1:] {
				rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				c.release(rctx, r.LockKey, r.Fence)
				cancel()
			}
			s.Release(context.Background())
			return nil, err
		}
		s.leases = append(s.leases, l)
		context.AfterFunc(l.ctx, func() { s.cancel(context.Cause(l.ctx)) })
	}
	return s, nil
}

// Leases are the set's leases, in key order.
func (s *KeySet) Leases() []*Lease { return slices.Clone(s.leases) }

// Keys are the set's keys, in key order.
func (s *KeySet) Keys() []string {
	keys := make([]string, len(s.leases))
	for i, l := range s.leases {
		keys[i] = l.Key()
	}
	return keys
}

// Lease is the set's lease on key, nil if key is not in the set.
func (s *KeySet) Lease(key string) *Lease {
	for _, l := range s.leases {
		if l.Key() == key {
			return l
		}
	}
	return nil
}

// Context ends when any lease of the set ends (lost or released);
// context.Cause is that lease's cause.
func (s *KeySet) Context() context.Context { return s.ctx }

// Renew renews every lease of the set (for WithoutAutoRenew; auto-renewal
// renews each by itself). The error joins each lease's.
func (s *KeySet) Renew(ctx context.Context) error {
	return s.each(func(l *Lease) error { return l.Renew(ctx) })
}

// Release gives every lease of the set back, at once. The error joins each
// lease's (ErrLeaseLost for one that had expired or been taken).
func (s *KeySet) Release(ctx context.Context) error {
	return s.each(func(l *Lease) error { return l.Release(ctx) })
}

// HoldAtLeast sets the minimum hold of every lease of the set (see
// Lease.HoldAtLeast).
func (s *KeySet) HoldAtLeast(d time.Duration) error {
	return s.each(func(l *Lease) error { return l.HoldAtLeast(d) })
}

func (s *KeySet) each(fn func(*Lease) error) error {
	errs := make([]error, len(s.leases))
	var wg sync.WaitGroup
	for i, l := range s.leases {
		wg.Go(func() { errs[i] = fn(l) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Done is closed when any lease of the set ends.
func (s *KeySet) Done() <-chan struct{} { return s.ctx.Done() }

// Err is nil while every lease of the set is held, and the cause of the
// first one that ended once one has.
func (s *KeySet) Err() error {
	if s.ctx.Err() == nil {
		return nil
	}
	return context.Cause(s.ctx)
}

// Deadline is the earliest local deadline of the set's leases.
func (s *KeySet) Deadline() time.Time {
	d := s.leases[0].Deadline()
	for _, l := range s.leases[1:] {
		if ld := l.Deadline(); ld.Before(d) {
			d = ld
		}
	}
	return d
}
