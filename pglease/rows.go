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

// leaseRow says which row holds a lease: a mutex lease's row in lock_leases
// (the zero value), or a slot of a semaphore or of a shared/exclusive key in
// pgfence_permits. Renew, Release and the read after a release that found
// nothing go to that row; everything else about a lease is the same for
// every kind.
type leaseRow struct {
	permit  bool  // a slot in pgfence_permits
	slot    int32 // the slot, 0..permits-1 for a semaphore
	permits int   // the semaphore's number of permits; 0 for shared/exclusive
	shared  bool  // a slot of a shared/exclusive key

	// hold is the minimum hold (HoldAtLeast): a release before the grant
	// time plus hold leaves the lease held until then. Guarded by the
	// lease's mu.
	hold time.Duration
}

// renewRow extends l's row by its TTL (the Renew statement of its kind).
func (l *Lease) renewRow(ctx context.Context) (time.Time, error) {
	if l.row.permit {
		return l.c.own(ctx).RenewPermit(ctx, fencesql.RenewPermitParams{LockKey: l.key, Slot: l.row.slot, Fence: l.fence, TtlMicros: l.ttl.Microseconds()})
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
	case l.row.permit:
		released, err = q.ReleasePermit(ctx, fencesql.ReleasePermitParams{
			LockKey: l.key, Slot: l.row.slot, Fence: l.fence, HoldMicros: hold.Microseconds(), Durable: durable,
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

// abandonRow gives up the grant under token in the row row names (a mutex
// lease's Abandon, or a slot's), tombstoning the token.
func (c *Client) abandonRow(ctx context.Context, key, token string, row leaseRow) error {
	if row.permit {
		_, err := c.own(ctx).AbandonPermit(ctx, fencesql.AbandonPermitParams{LockKey: key, OwnerToken: token})
		return err
	}
	_, err := c.abandon(ctx, key, token)
	return err
}

// currentFence is the fence l's row carries now, held or not.
func (l *Lease) currentFence(ctx context.Context) (int64, error) {
	if l.row.permit {
		return l.c.own(ctx).PermitFence(ctx, fencesql.PermitFenceParams{LockKey: l.key, Slot: l.row.slot})
	}
	return l.c.queries(ctx).LeaseFence(ctx, l.key)
}

// Slot is the permit's slot of a semaphore lease, 0 to permits-1: no two
// unexpired permits of one key share a slot, so it can name one of N
// resources (a device, a connection). A shared lease's slot tells it from
// the key's other shared leases; a mutex or exclusive lease's slot is 0.
func (l *Lease) Slot() int { return int(l.row.slot) }

// Permits is the number of permits of the semaphore l holds a permit of;
// 0 for any other kind of lease.
func (l *Lease) Permits() int { return l.row.permits }

// Shared reports whether l is a shared lease of a shared/exclusive key
// (false for its exclusive lease, as for a mutex or a permit).
func (l *Lease) Shared() bool { return l.row.shared }

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
