package pglease

import (
	"context"
	"errors"
	"time"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/fencesql"
)

// Campaign competes for leadership under key until ctx ends, for as many
// terms as it wins. Each time it wins (Acquire, with the client's backoff),
// it calls lead with a context that ends when leadership is lost, and with
// the term's lease, whose Fence is the term's epoch (the lease also gives
// the leader its Deadline, and Renew when the client was made
// WithoutAutoRenew). The epoch is what makes a deposed
// leader harmless: followers and downstream resources must refuse commands
// that carry an older epoch than the newest they have seen (package pgguard
// does that for rows), because a leader that was paused does not know it was
// deposed until after it acts.
//
// When lead returns nil or leadership is lost, Campaign releases the lease,
// waits the client's maximum backoff so that others get a turn, and
// campaigns again. When lead returns another error, Campaign releases and
// returns it. When ctx ends, Campaign returns ctx's cause. Leadership is
// renewed automatically unless the client was made WithoutAutoRenew.
func (c *Client) Campaign(ctx context.Context, key string, ttl time.Duration, lead func(ctx context.Context, term *Lease) error) error {
	if err := c.checkArgs(key, ttl); err != nil {
		return err
	}
	if lead == nil {
		return invalid("nil lead function")
	}
	for {
		l, err := c.Acquire(ctx, key, ttl)
		switch {
		case ctx.Err() != nil:
			if l != nil {
				c.run(ctx, l, func(context.Context, *Lease) error { return nil })
			}
			return context.Cause(ctx)
		case errors.Is(err, pgfence.ErrNotAcquired), err != nil && isTransient(err):
			continue // a maximum wait passed or the server blinked: keep campaigning
		case err != nil:
			return err
		}
		c.cfg.logger.Info("pglease: leading", "key", key, "epoch", l.Fence())
		err = c.run(ctx, l, lead)
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if err != nil && !errors.Is(err, pgfence.ErrLeaseLost) && !errors.Is(err, ErrReleased) && !errors.Is(err, context.Canceled) {
			return err
		}
		c.cfg.logger.Info("pglease: stepped down", "key", key, "epoch", l.Fence(), "err", err)
		t := time.NewTimer(c.cfg.backoffMax)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
	}
}

// Holder describes who holds a key, as the database clock sees it now.
type Holder struct {
	Key string
	// Kind is the kind the key is held in: Exclusive (a plain lease, whose
	// holder Owner is), or Shared or Permits while shared leases or a
	// semaphore's permits hold it: then Owner is empty, Fence is the highest
	// granted on the key, Held and Remaining say until when the last of them
	// holds it, and Holders lists them.
	Kind  Kind
	Owner string
	Fence int64 // for a leader: the epoch
	Held  bool  // false: the last lease expired or was released
	// Since is when the lease with this Fence was granted (acquired_at,
	// by the database clock); renewals do not move it.
	Since time.Time
	// Remaining is how long the lease has left by the database clock.
	Remaining time.Duration
	// Slot is a shared holder's or permit's slot (Lease.Slot); 0 for the
	// key itself.
	Slot int
	// Holders are the unexpired shared holders or permits of a key held in
	// either kind, by slot, each with its own Owner, Fence, Since, Remaining
	// and Slot; nil for a key held exclusively or not held.
	Holders []Holder
}

// Holder reports the current (or last) holder of key, with every shared
// holder or permit when the key is held in those kinds, read in one
// statement. ok is false when the key was never leased or its row was swept.
func (c *Client) Holder(ctx context.Context, key string) (h Holder, ok bool, err error) {
	if err := validateKey(key); err != nil {
		return Holder{}, false, err
	}
	rows, err := c.own(ctx).KeyHolders(ctx, key)
	if err != nil {
		return Holder{}, false, c.explain(key, err)
	}
	if len(rows) == 0 || rows[0].Slot != 0 {
		return Holder{}, false, nil // never leased, or swept: holders of slots from 1 without the key's row are a sweep in progress
	}
	h = holderOf(key, rows[0])
	for _, r := range rows[1:] {
		h.Holders = append(h.Holders, holderOf(key, r))
	}
	return h, true, nil
}

// holderOf is one row of KeyHolders as a Holder.
func holderOf(key string, r fencesql.KeyHoldersRow) Holder {
	k := Kind{}
	if r.Kind != kindExclusive {
		k = Kind{name: r.Kind, permits: int(r.Permits)}
	}
	return Holder{Key: key, Kind: k, Owner: r.Owner, Fence: r.Fence, Held: r.Held, Since: r.AcquiredAt,
		Remaining: time.Duration(r.RemainingMicros) * time.Microsecond, Slot: max(int(r.Slot)-1, 0)}
}
