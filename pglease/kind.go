package pglease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence"
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

// Kind is the kind of hold an acquisition asks of its key: Exclusive (the
// default: a plain lease), Shared, or a permit of a semaphore (Permits). A
// key is one lock whatever kind its holders ask for, and each grant, of any
// kind, is a *Lease with its own fence from the one fence source, so every
// grant's fence is above every earlier grant's of any kind.
//
// Shared leases are read-write locking: a key is held by any number of
// unexpired shared leases, or by one exclusive lease. Writer preference:
// while an exclusive Acquire of a key held shared (or as permits) waits, no
// new shared lease (or permit) of it is granted, so a stream of shared
// acquirers cannot starve it. The waiter's place is a row with an expiry of
// its own, refreshed on every attempt: a waiter that gives up removes it,
// one that dies stops blocking shared acquirers a few seconds after its last
// attempt. TryAcquire never takes a place.
//
// Permits make the key a semaphore: at most that many unexpired permits are
// held at any time, enforced by the database (every acquisition of the key
// is judged under the key's locks, by the database clock). Each permit has a
// slot (Lease.Slot) in 0..permits-1 that no other unexpired permit of the key
// has. A dead holder's permit returns at its TTL.
//
// While a key is held shared or as permits, an exclusive acquisition waits
// for every holder to give it back (TryAcquire: ErrNotAcquired), and another
// kind (shared beside permits, or permits of another number) is refused with
// ErrPermitsMismatch; while the key is held exclusively, nothing else is
// granted. Kinds are comparable: l.Kind() == pglease.Shared().
type Kind struct {
	name    string // kindShared or kindPermit; "" for exclusive
	permits int    // the semaphore's number of permits, for kindPermit
}

// Exclusive is the exclusive kind, a plain lease: what an acquisition takes
// without a kind.
func Exclusive() Kind { return Kind{} }

// Shared is the shared kind: held beside other shared leases of the key,
// never beside an exclusive one.
func Shared() Kind { return Kind{name: kindShared} }

// Permits is the kind of one of n permits of a semaphore named by the key,
// 1 to 10000 of them. Every holder of the key must agree on n: a
// disagreement is found by the acquisition (ErrPermitsMismatch), and an n
// out of range refused by it with ErrInvalidInput.
func Permits(n int) Kind { return Kind{name: kindPermit, permits: n} }

// String is the kind's name as pgfence_acquire_kind and `pgfence list` name
// it: "exclusive", "shared" or "permit".
func (k Kind) String() string {
	if k.name == "" {
		return kindExclusive
	}
	return k.name
}

// Permits is the number of permits of a permit's semaphore; 0 for the other
// kinds.
func (k Kind) Permits() int { return k.permits }

// kindOf is the one kind of an acquisition's optional argument: Exclusive
// when none is given.
func kindOf(kinds []Kind) (Kind, error) {
	switch {
	case len(kinds) == 0:
		return Kind{}, nil
	case len(kinds) > 1:
		return Kind{}, invalid("an acquisition takes one kind, got %d", len(kinds))
	}
	k := kinds[0]
	if k.name == kindPermit && (k.permits < 1 || k.permits > validate.MaxPermits) {
		return Kind{}, invalid("a semaphore needs 1 to %d permits, got %d", validate.MaxPermits, k.permits)
	}
	return k, nil
}

// trySlot is one attempt at a shared lease or a permit of key.
func (c *Client) trySlot(ctx context.Context, key string, ttl time.Duration, k Kind) (*Lease, error) {
	return c.grantSlot(ctx, key, ttl, leaseRow{kind: k}, c.sendKind(key, k.name, k.permits, ttl, 0))
}

// acquireSlot is Acquire of a shared lease or a permit: waiting with
// backoff, or with WithFairWaiting in the key's queue.
func (c *Client) acquireSlot(ctx context.Context, key string, ttl time.Duration, k Kind) (*Lease, error) {
	if c.cfg.fair {
		return c.waitInQueue(ctx, key, func(ctx context.Context, token string) (*Lease, error) {
			return c.grantSlotAs(ctx, key, ttl, leaseRow{kind: k}, token, c.sendQueued(key, k.name, k.permits, ttl))
		})
	}
	return c.waitFor(ctx, key, key, func(ctx context.Context) (*Lease, error) { return c.trySlot(ctx, key, ttl, k) })
}

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
		return nil, err
	case isNoRows(err):
		return nil, notAcquired(key)
	case pgerr.IsLockNotAvailable(err):
		return nil, fmt.Errorf("%w: %q (other acquisitions of the key were in progress)", pgfence.ErrNotAcquired, key)
	case pgerr.Is(err, pgerr.PermitsMismatch):
		return nil, fmt.Errorf("%w: %w", ErrPermitsMismatch, err)
	case mayHaveExecuted(err):
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
