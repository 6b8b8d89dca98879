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

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/fencesql"
	"github.com/pgfence/pgfence/internal/pgerr"
	"github.com/pgfence/pgfence/internal/validate"
)

// KeySet is the mutex leases of several keys, taken together in one
// statement: all granted, each with its own fence, or none. Each is a
// *Lease (renewed, lost and released as any); the set's Context ends when
// any of them ends, and Release gives them all back.
type KeySet struct {
	leases []*Lease // in key order
	ctx    context.Context
	cancel context.CancelCauseFunc

	// renewTimer fires when the set's next auto-renewal is due: the set
	// renews its leases together, in one statement, rather than each on
	// its own timer. nil without auto-renewal.
	renewTimer *time.Timer
}

// TryAcquireSet takes the mutex leases of keys for ttl, all or none: when
// any key is held by another owner it returns pgfence.ErrNotAcquired at once (its
// text names the held keys) and takes none. Two callers asking for
// overlapping sets, in any order, never deadlock: the keys are taken in
// key order, each wait bounded. The keys must be distinct, 1 to
// 64 of them.
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
	if len(keys) == 0 || len(keys) > validate.MaxSetKeys {
		return nil, invalid("a key set needs 1 to %d keys, got %d", validate.MaxSetKeys, len(keys))
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
		return nil, fmt.Errorf("%w: key set %q", pgfence.ErrNotAcquired, keys)
	case errors.As(err, &pe) && pe.Code == pgerr.KeySetHeld:
		return nil, fmt.Errorf("%w: %s", pgfence.ErrNotAcquired, strings.TrimPrefix(pe.Message, "pgfence: "))
	case pgerr.IsLockNotAvailable(err):
		return nil, fmt.Errorf("%w: key set %q (another acquisition was in progress)", pgfence.ErrNotAcquired, keys)
	case mayHaveExecuted(err):
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
				return nil, &ambiguousError{key: strings.Join(keys, ","), ttl: ttl, err: cause, resolveErr: err}
			}
			rows = append(rows, fencesql.AcquireKeySetRow{LockKey: k, Fence: r.Fence, ExpiresAt: r.ExpiresAt})
		}
		if len(rows) == len(keys) {
			return c.startSet(token, rows, ttl, sent)
		}
	}
	for _, k := range keys {
		if _, err := c.abandon(rctx, k, token); err != nil {
			return nil, &ambiguousError{key: strings.Join(keys, ","), ttl: ttl, err: cause, resolveErr: err}
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
	if c.cfg.autoRenew {
		for _, l := range s.leases {
			l.mu.Lock()
			l.inSet = true
			l.renewTimer.Stop()
			l.mu.Unlock()
		}
		s.renewTimer = time.AfterFunc(c.schedule(ttl).Interval(), s.renewDue)
	}
	return s, nil
}

// renewDue runs on the set's renew timer: one auto-renewal of the leases
// not released or lost, in one statement, as Lease's renewDue does for one
// lease (each lease's renewing slot is held meanwhile, so that Release waits
// for it); then the next one is scheduled.
func (s *KeySet) renewDue() {
	var live []*Lease
	for _, l := range s.leases {
		l.renewing <- struct{}{}
		l.mu.Lock()
		done := l.stopping || l.ended
		l.mu.Unlock()
		if done {
			<-l.renewing
			continue
		}
		live = append(live, l)
	}
	if len(live) == 0 {
		return
	}
	deadline := live[0].Deadline()
	for _, l := range live[1:] {
		if d := l.Deadline(); d.Before(deadline) {
			deadline = d
		}
	}
	// The attempt may last until the earliest local deadline, no longer.
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	errs := renewLeases(ctx, live)
	cancel()
	ok := true
	for i, err := range errs {
		if err != nil && !errors.Is(err, pgfence.ErrLeaseLost) && live[i].ctx.Err() == nil {
			live[i].renewFailed(err)
			ok = false
		}
	}
	for _, l := range live {
		<-l.renewing
	}
	c := live[0].c
	next := c.schedule(live[0].ttl).Next(ok)
	for _, l := range live {
		l.mu.Lock()
		again := !l.stopping && !l.ended
		l.mu.Unlock()
		if again {
			s.renewTimer.Reset(next)
			return
		}
	}
}

// renewLeases renews leases (of one set, so of one client and TTL) in one
// statement and returns each one's outcome, as Lease.Renew's; through the
// client's renew hook, when a test set one, one by one.
func renewLeases(ctx context.Context, leases []*Lease) []error {
	c := leases[0].c
	errs := make([]error, len(leases))
	if c.renewHook != nil {
		for i, l := range leases {
			errs[i] = l.Renew(ctx)
		}
		return errs
	}
	sent := time.Now()
	keys, fences, _ := setPart{leases: leases}.rows()
	rows, err := c.own(ctx).RenewKeySet(ctx, fencesql.RenewKeySetParams{
		LockKeys: keys, Fences: fences, TtlMicros: leases[0].ttl.Microseconds()})
	renewed := make(map[string]time.Time, len(rows))
	for _, r := range rows {
		renewed[r.LockKey] = r.ExpiresAt
	}
	for i, l := range leases {
		exp, ok := renewed[l.key]
		lerr := err
		if err == nil && !ok {
			lerr = pgx.ErrNoRows
		}
		errs[i] = l.renewed(ctx, sent, exp, lerr)
	}
	return errs
}

// Leases are the set's leases, in key order.
func (s *KeySet) Leases() []*Lease { return slices.Clone(s.leases) }

// Context ends when any lease of the set ends (lost or released):
// context.Cause(s.Context()) is nil while every lease is held, and then that
// lease's cause. The set's local deadline is the earliest Deadline of its
// Leases.
func (s *KeySet) Context() context.Context { return s.ctx }

// Renew renews every lease of the set, in one statement (for
// WithoutAutoRenew; auto-renewal renews the set's leases together too). The
// error joins each lease's (pgfence.ErrLeaseLost for one that was gone).
func (s *KeySet) Renew(ctx context.Context) error {
	live := s.filter(func(l *Lease) error { return l.renewable() })
	if len(live.leases) == 0 {
		return live.err()
	}
	live.errs = append(live.errs, renewLeases(ctx, live.leases)...)
	return live.err()
}

// Release gives every lease of the set back, in one statement. The error
// joins each lease's (pgfence.ErrLeaseLost for one that had expired or been taken).
func (s *KeySet) Release(ctx context.Context) error {
	held := s.filter(func(l *Lease) error {
		done, err := l.stopForRelease(ctx)
		if done && err == nil {
			return errSkip
		}
		return err
	})
	if s.renewTimer != nil {
		s.renewTimer.Stop() // every lease is stopping now: nothing to renew
	}
	// The set's context ends with its leases' before Release returns, not
	// only when their AfterFuncs run.
	defer s.endWithLeases()
	if len(held.leases) == 0 {
		return held.err()
	}
	c := held.leases[0].c
	keys, fences, holds := held.rows()
	released, err := c.own(ctx).ReleaseKeySet(ctx, fencesql.ReleaseKeySetParams{
		LockKeys: keys, Fences: fences, HoldMicros: holds, Durable: c.cfg.durableRelease, Notify: c.cfg.wakeOnRelease})
	for _, l := range held.leases {
		held.errs = append(held.errs, l.releasedRow(ctx, slices.Contains(released, l.key), err))
	}
	return held.err()
}

// endWithLeases ends the set's context with the cause of its first ended
// lease, if any has ended.
func (s *KeySet) endWithLeases() {
	for _, l := range s.leases {
		if l.ctx.Err() != nil {
			s.cancel(context.Cause(l.ctx))
			return
		}
	}
}

// errSkip, from filter's check, leaves a lease out without an error.
var errSkip = errors.New("skip")

// setPart is the leases of a set that passed a check, and the errors of
// those that did not.
type setPart struct {
	leases []*Lease
	errs   []error
}

// filter runs check on every lease of the set, in key order.
func (s *KeySet) filter(check func(*Lease) error) setPart {
	var p setPart
	for _, l := range s.leases {
		switch err := check(l); {
		case err == nil:
			p.leases = append(p.leases, l)
		case !errors.Is(err, errSkip):
			p.errs = append(p.errs, err)
		}
	}
	return p
}

func (p setPart) err() error { return errors.Join(p.errs...) }

// rows are the keys, fences and minimum holds (in microseconds) of p's
// leases, for the statements that take the whole set.
func (p setPart) rows() (keys []string, fences, holds []int64) {
	for _, l := range p.leases {
		l.mu.Lock()
		hold := l.row.hold
		l.mu.Unlock()
		keys, fences, holds = append(keys, l.key), append(fences, l.fence), append(holds, hold.Microseconds())
	}
	return keys, fences, holds
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
