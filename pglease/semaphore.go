package pglease

import (
	"context"
	"errors"
	"fmt"
	"github.com/pgfence/pgfence"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/internal/fencesql"
	"github.com/pgfence/pgfence/internal/pgerr"
	"github.com/pgfence/pgfence/internal/validate"
)

// ErrPermitsMismatch: the key is held in a kind that cannot share it with
// the one asked for (shared leases and a semaphore's permits, or two
// semaphores of different numbers of permits). Nothing was granted. The
// error names the kind the key is held in; the kind may change only while
// nothing is held.
var ErrPermitsMismatch = errors.New("pglease: callers disagree about the key's permits")

// Semaphore is a key with a fixed number of permits: at most that many
// unexpired permits are held at any time, enforced by the database (every
// acquisition of the key is judged under the key's locks, by the database
// clock). Each permit is a *Lease with its own fence from the one fence
// source, auto-renewed, with its loss context and Release, and a slot
// (Lease.Slot) in 0..permits-1 that no other unexpired permit of the key
// has. A dead holder's permit returns at its TTL.
//
// A key is one lock whatever kind its holders ask for: while a permit is
// held, an exclusive (plain) lease of the key waits for every permit to be
// given back, and a shared lease or a semaphore of another number of
// permits is refused with ErrPermitsMismatch; while the key is held
// exclusively, no permit is granted.
type Semaphore struct {
	c       *Client
	key     string
	permits int
}

// Semaphore returns the semaphore of permits permits named key, 1 to 10000
// of them. It sends nothing: a disagreement with the key's holders about the number is found
// by the first acquisition (ErrPermitsMismatch).
func (c *Client) Semaphore(key string, permits int) (*Semaphore, error) {
	if err := validateKey(key); err != nil {
		return nil, err
	}
	if permits < 1 || permits > validate.MaxPermits {
		return nil, invalid("a semaphore needs 1 to %d permits, got %d", validate.MaxPermits, permits)
	}
	return &Semaphore{c: c, key: key, permits: permits}, nil
}

// TryAcquire takes a free permit for ttl, the lowest free slot, or returns
// pgfence.ErrNotAcquired at once when all permits are held.
func (s *Semaphore) TryAcquire(ctx context.Context, ttl time.Duration) (*Lease, error) {
	if err := s.c.checkArgs(s.key, ttl); err != nil {
		return nil, err
	}
	start := time.Now()
	l, err := s.try(ctx, ttl)
	s.c.met.acquired(opTry, start, err)
	return l, err
}

// Acquire takes a permit, waiting as Client.Acquire waits while all are
// held; with WithFairWaiting, in the key's queue.
func (s *Semaphore) Acquire(ctx context.Context, ttl time.Duration) (*Lease, error) {
	if err := s.c.checkArgs(s.key, ttl); err != nil {
		return nil, err
	}
	if s.c.cfg.fair {
		return s.c.waitInQueue(ctx, s.key, func(ctx context.Context, token string) (*Lease, error) {
			return s.c.grantSlotAs(ctx, s.key, ttl, s.row(), token, s.c.sendQueued(s.key, kindPermit, s.permits, ttl))
		})
	}
	return s.c.waitFor(ctx, s.key, s.key, func(ctx context.Context) (*Lease, error) { return s.try(ctx, ttl) })
}

// Do takes a permit (waiting), runs fn under it as Client.Do does, and
// releases it when fn returns.
func (s *Semaphore) Do(ctx context.Context, ttl time.Duration, fn func(ctx context.Context, l *Lease) error) error {
	if fn == nil {
		return invalid("Do needs a function to run")
	}
	l, err := s.Acquire(ctx, ttl)
	if err != nil {
		return err
	}
	return s.c.run(ctx, l, fn)
}

// TryDo is Do that does not wait: pgfence.ErrNotAcquired at once when all permits
// are held.
func (s *Semaphore) TryDo(ctx context.Context, ttl time.Duration, fn func(ctx context.Context, l *Lease) error) error {
	if fn == nil {
		return invalid("TryDo needs a function to run")
	}
	l, err := s.TryAcquire(ctx, ttl)
	if err != nil {
		return err
	}
	return s.c.run(ctx, l, fn)
}

func (s *Semaphore) try(ctx context.Context, ttl time.Duration) (*Lease, error) {
	return s.c.grantSlot(ctx, s.key, ttl, s.row(), s.c.sendKind(s.key, kindPermit, s.permits, ttl, 0))
}

func (s *Semaphore) row() leaseRow { return leaseRow{permits: s.permits} }

func isNotAcquired(err error) bool { return errors.Is(err, pgfence.ErrNotAcquired) }

// The kinds a key can be held in, as pgfence_acquire_kind names them.
const (
	kindExclusive = "exclusive"
	kindShared    = "shared"
	kindPermit    = "permit"
)

// slotGrant is what an acquisition through pgfence_acquire_kind returns.
type slotGrant struct {
	Slot      int32
	Fence     int64
	ExpiresAt time.Time
}

// sendKind is one attempt to take key in kind as its holders allow now
// (with place > 0, an exclusive attempt refused while the key is held
// shared keeps a waiter's place that long), for grantSlotAs.
func (c *Client) sendKind(key, kind string, permits int, ttl, place time.Duration) func(context.Context, *fencesql.Queries, string) (slotGrant, error) {
	return func(ctx context.Context, q *fencesql.Queries, token string) (slotGrant, error) {
		r, err := q.AcquireKind(ctx, fencesql.AcquireKindParams{
			LockKey: key, Kind: kind, Permits: int32(permits), Owner: c.cfg.owner, OwnerToken: token,
			TtlMicros: ttl.Microseconds(), PlaceMicros: place.Microseconds()})
		return slotGrant(r), err
	}
}

// sendQueued is one attempt of a fair waiter of key in kind, for
// grantSlotAs.
func (c *Client) sendQueued(key, kind string, permits int, ttl time.Duration) func(context.Context, *fencesql.Queries, string) (slotGrant, error) {
	return func(ctx context.Context, q *fencesql.Queries, token string) (slotGrant, error) {
		r, err := q.AcquireQueued(ctx, fencesql.AcquireQueuedParams{
			LockKey: key, Kind: kind, Permits: int32(permits), Owner: c.cfg.owner, OwnerToken: token,
			TtlMicros: ttl.Microseconds(), PlaceMicros: c.fairPlace().Microseconds()})
		return queuedGrant(key, slotGrant{Slot: r.Slot, Fence: r.Fence, ExpiresAt: r.ExpiresAt}, r.Ahead, err)
	}
}

// grantSlot sends one acquisition through pgfence_acquire_kind (send) under
// a new owner token and turns its answer into a lease, as tryAcquire does
// for the fast exclusive upsert: no row is pgfence.ErrNotAcquired, a lost answer is
// settled by the owner token.
func (c *Client) grantSlot(ctx context.Context, key string, ttl time.Duration, row leaseRow,
	send func(context.Context, *fencesql.Queries, string) (slotGrant, error)) (*Lease, error) {
	return c.grantSlotAs(ctx, key, ttl, row, "", send)
}

// grantSlotAs is grantSlot under the owner token token, or a new one when
// token is "".
func (c *Client) grantSlotAs(ctx context.Context, key string, ttl time.Duration, row leaseRow, token string,
	send func(context.Context, *fencesql.Queries, string) (slotGrant, error)) (*Lease, error) {
	if token == "" {
		token = newToken()
	}
	sent := time.Now()
	g, err := send(ctx, c.own(ctx), token)
	switch {
	case err == nil:
		return c.startRow(key, token, g.Fence, g.ExpiresAt, ttl, sent, row.at(g.Slot))
	case isNotAcquired(err), errors.Is(err, errAbandonedPlace): // a fair waiter's refusal
		c.stats.notAcquired.Add(1)
		return nil, err
	case isNoRows(err):
		c.stats.notAcquired.Add(1)
		return nil, notAcquired(key)
	case pgerr.IsLockNotAvailable(err):
		c.stats.notAcquired.Add(1)
		return nil, fmt.Errorf("%w: %q (other acquisitions of the key were in progress)", pgfence.ErrNotAcquired, key)
	case pgerr.Is(err, pgerr.PermitsMismatch):
		return nil, fmt.Errorf("%w: %w", ErrPermitsMismatch, err)
	case mayHaveExecuted(err):
		c.stats.ambiguous.Add(1)
		return c.resolveSlot(ctx, key, token, ttl, sent, row, err)
	default:
		return nil, c.explain(key, err)
	}
}

// resolveSlot settles a slot acquisition whose answer was lost: a caller
// still waiting adopts the slot if it was granted; otherwise the token is
// tombstoned and whatever it holds released, under the key's lock, so that
// no acquisition under it can be granted later.
func (c *Client) resolveSlot(ctx context.Context, key, token string, ttl time.Duration, sent time.Time, row leaseRow, cause error) (*Lease, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.resolveWait)
	defer cancel()
	q := c.own(rctx)
	if ctx.Err() == nil {
		r, err := q.FindSlotByOwnerToken(rctx, fencesql.FindSlotByOwnerTokenParams{LockKey: key, OwnerToken: token})
		if err == nil {
			return c.startRow(key, token, r.Fence, r.ExpiresAt, ttl, sent, row.at(r.Slot))
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, &ambiguousError{key: key, ttl: ttl, err: cause, resolveErr: err}
		}
	}
	if _, err := q.AbandonSlot(rctx, fencesql.AbandonSlotParams{LockKey: key, OwnerToken: token}); err != nil {
		return nil, &ambiguousError{key: key, ttl: ttl, err: cause, resolveErr: err}
	}
	return nil, fmt.Errorf("pglease: acquiring %q: no answer from the server, and the permit was not kept: %w", key, cause)
}
