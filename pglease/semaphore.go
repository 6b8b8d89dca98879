package pglease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/internal/fencesql"
	"github.com/pgfence/pgfence/internal/pgerr"
	"github.com/pgfence/pgfence/internal/validate"
)

// ErrPermitsMismatch: the key is held as another kind of key, or as a
// semaphore with another number of permits, by callers that disagree with
// this one. Nothing was granted. Every caller of one key must use the same
// kind and number; the number may change only while no permit is held.
var ErrPermitsMismatch = errors.New("pglease: callers disagree about the key's permits")

// Semaphore is a key with a fixed number of permits: at most that many
// unexpired permits are held at any time, enforced by the database (every
// acquisition of the key is judged under the key's row lock, by the
// database clock). Each permit is a *Lease with its own fence from the one
// fence source, auto-renewed, with its loss context and Release, and a slot
// (Lease.Slot) in 0..permits-1 that no other unexpired permit of the key
// has. A dead holder's permit returns at its TTL.
//
// The key of a semaphore is not the key of a mutex lease of the same name:
// they are separate namespaces. Shared/exclusive keys share the semaphores'
// namespace, so a key is either a semaphore or a shared/exclusive key.
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
// ErrNotAcquired at once when all permits are held.
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
		return s.c.waitInQueue(ctx, s.key, true, func(ctx context.Context, token string) (*Lease, error) {
			return s.tryFair(ctx, ttl, token)
		})
	}
	return s.c.waitFor(ctx, s.key, s.key, func(ctx context.Context) (*Lease, error) { return s.try(ctx, ttl) })
}

// tryFair is one attempt of a fair waiter under token.
func (s *Semaphore) tryFair(ctx context.Context, ttl time.Duration, token string) (*Lease, error) {
	row := leaseRow{permit: true, permits: s.permits}
	return s.c.grantSlotAs(ctx, s.key, ttl, row, token, func(ctx context.Context, q *fencesql.Queries, token string) (slotGrant, error) {
		r, err := q.AcquirePermitFIFO(ctx, fencesql.AcquirePermitFIFOParams{
			LockKey: s.key, Permits: int32(s.permits), Owner: s.c.cfg.owner, OwnerToken: token,
			TtlMicros: ttl.Microseconds(), PlaceMicros: s.c.fairPlace().Microseconds()})
		return queuedGrant(s.key, slotGrant{Slot: r.Slot, Fence: r.Fence, ExpiresAt: r.ExpiresAt}, r.Ahead, err)
	})
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

// TryDo is Do that does not wait: ErrNotAcquired at once when all permits
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
	row := leaseRow{permit: true, permits: s.permits}
	return s.c.grantSlot(ctx, s.key, ttl, row, func(ctx context.Context, q *fencesql.Queries, token string) (slotGrant, error) {
		r, err := q.AcquirePermit(ctx, fencesql.AcquirePermitParams{
			LockKey: s.key, Permits: int32(s.permits), Owner: s.c.cfg.owner, OwnerToken: token, TtlMicros: ttl.Microseconds()})
		return slotGrant(r), err
	})
}

func isNotAcquired(err error) bool { return errors.Is(err, ErrNotAcquired) }

// slotGrant is what an acquisition of a slot returns.
type slotGrant struct {
	Slot      int32
	Fence     int64
	ExpiresAt time.Time
}

// grantSlot sends one acquisition of a slot in pgfence_permits (send) under
// a new owner token and turns its answer into a lease, as tryAcquire does
// for a mutex: no row is ErrNotAcquired, a lost answer is settled by the
// owner token.
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
		row.slot = g.Slot
		return c.startRow(key, token, g.Fence, g.ExpiresAt, ttl, sent, row)
	case isNotAcquired(err), errors.Is(err, errAbandonedPlace): // a fair waiter's refusal
		c.stats.notAcquired.Add(1)
		return nil, err
	case isNoRows(err):
		c.stats.notAcquired.Add(1)
		return nil, notAcquired(key)
	case pgerr.IsLockNotAvailable(err):
		c.stats.notAcquired.Add(1)
		return nil, fmt.Errorf("%w: %q (other acquisitions of the key were in progress)", ErrNotAcquired, key)
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
		r, err := q.FindPermitByOwnerToken(rctx, fencesql.FindPermitByOwnerTokenParams{LockKey: key, OwnerToken: token})
		if err == nil {
			row.slot = r.Slot
			return c.startRow(key, token, r.Fence, r.ExpiresAt, ttl, sent, row)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, &ambiguousError{key: key, ttl: ttl, err: cause, resolveErr: err}
		}
	}
	if _, err := q.AbandonPermit(rctx, fencesql.AbandonPermitParams{LockKey: key, OwnerToken: token}); err != nil {
		return nil, &ambiguousError{key: key, ttl: ttl, err: cause, resolveErr: err}
	}
	return nil, fmt.Errorf("pglease: acquiring %q: no answer from the server, and the permit was not kept: %w", key, cause)
}
