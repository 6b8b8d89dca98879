package pglease

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/fencesql"
	"github.com/pgfence/pgfence/internal/validate"
)

// leaseRow says which row of lock_leases holds a lease: the key's row, slot
// 0, for an exclusive lease (the zero value: a plain lease is the exclusive
// kind), or a slot from 1 up for a shared lease or a permit. Renew, Release
// and the read after a release that found nothing go to that row;
// everything else about a lease is the same for every kind.
type leaseRow struct {
	slot int32 // the row's slot: 0 for the key's row, 1 and up for a shared holder or permit
	kind Kind  // the kind granted

	// hold is the minimum hold (HoldAtLeast): a release before the grant
	// time plus hold leaves the lease held until then. Guarded by the
	// lease's mu.
	hold time.Duration
}

// at is r for a grant in slot: a grant of the key's row is an exclusive
// lease, whatever kind was asked for.
func (r leaseRow) at(slot int32) leaseRow {
	if slot == 0 {
		return leaseRow{hold: r.hold} // the zero Kind: exclusive
	}
	r.slot = slot
	return r
}

// renewRow extends l's row by its TTL (the Renew statement of its kind).
func (l *Lease) renewRow(ctx context.Context) (time.Time, error) {
	if l.row.slot > 0 {
		return l.c.own(ctx).RenewSlot(ctx, fencesql.RenewSlotParams{LockKey: l.key, Fence: l.fence, TtlMicros: l.ttl.Microseconds()})
	}
	return l.c.queries(ctx).Renew(ctx, fencedb.RenewParams{LockKey: l.key, Fence: l.fence, TtlMicros: l.ttl.Microseconds()})
}

// releaseRow expires l's row now, or at its grant time plus the minimum
// hold if that is later; released is false when nothing was held any more.
func (l *Lease) releaseRow(ctx context.Context) (released bool, err error) {
	l.mu.Lock()
	hold := l.row.hold
	l.mu.Unlock()
	c, q, durable := l.c, l.c.own(ctx), l.c.cfg.durableRelease
	switch {
	case l.row.slot > 0:
		released, err = q.ReleaseSlot(ctx, fencesql.ReleaseSlotParams{
			LockKey: l.key, Fence: l.fence, HoldMicros: hold.Microseconds(), Durable: durable,
			Notify: c.cfg.wakeOnRelease})
	case hold > 0:
		released, err = q.ReleaseHeldAtLeast(ctx, fencesql.ReleaseHeldAtLeastParams{
			LockKey: l.key, Fence: l.fence, HoldMicros: hold.Microseconds(), Durable: durable})
	default:
		return c.release(ctx, l.key, l.fence)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return released, err
}

// abandonRow gives up the grant under token in the row row names (the
// key's row by Abandon, or a slot's), tombstoning the token.
func (c *Client) abandonRow(ctx context.Context, key, token string, row leaseRow) error {
	if row.slot > 0 {
		_, err := c.own(ctx).AbandonSlot(ctx, fencesql.AbandonSlotParams{LockKey: key, OwnerToken: token})
		return err
	}
	_, err := c.abandon(ctx, key, token)
	return err
}

// currentFence is the fence l's row carries now, held or not.
func (l *Lease) currentFence(ctx context.Context) (int64, error) {
	if l.row.slot > 0 {
		return l.c.own(ctx).SlotFence(ctx, fencesql.SlotFenceParams{LockKey: l.key, Slot: l.row.slot})
	}
	return l.c.queries(ctx).LeaseFence(ctx, l.key)
}

// Slot is a permit's slot, 0 to permits-1: no two
// unexpired permits of one key share a slot, so it can name one of N
// resources (a device, a connection). A shared lease's slot tells it from
// the key's other shared leases; a mutex or exclusive lease's slot is 0.
func (l *Lease) Slot() int { return max(int(l.row.slot)-1, 0) }

// Kind is the kind l was granted: the kind asked for, or Exclusive for a
// grant of the key's own row (slot 0), whatever was asked.
func (l *Lease) Kind() Kind { return l.row.kind }

// HoldAtLeast sets l's minimum hold: when l is released earlier than d after
// its grant, by the database clock, the key stays held until then, and no
// other owner is granted it meanwhile (Release returns at once; l's context
// ends as for any release). Scheduled work uses it so that an instance whose
// timer fires a little later than another's does not run the same tick
// again. A lease lost by expiry is not held longer. d = 0 removes the hold;
// d must lie in [0, 24h].
func (l *Lease) HoldAtLeast(d time.Duration) error {
	if d < 0 || d > validate.MaxTTL {
		return invalid("minimum hold %v is outside [0, %v]", d, validate.MaxTTL)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.row.hold = d
	return nil
}
