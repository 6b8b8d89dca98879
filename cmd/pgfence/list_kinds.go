package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/cmd/pgfence/internal/oddrow"
	"github.com/pgfence/pgfence/internal/fencesql"
	"github.com/pgfence/pgfence/internal/pgerr"
)

// kindRows are the rows of the kinds beyond the mutex lease: the unexpired
// permits of semaphores and the shared/exclusive leases (by key and slot),
// the fair waiters of every kind in queue order, and the exclusive waiters
// per key.
type kindRows struct {
	permits   []fencesql.ListPermitsRow
	waiters   []fencesql.ListWaitersRow
	exclusive []fencesql.ListExclusiveWaitersRow
}

// readKinds reads them; none at all on a schema from before these kinds.
func (a *app) readKinds(ctx context.Context, pool *pgxpool.Pool) (kindRows, error) {
	var k kindRows
	q := a.own(pool)
	var err error
	k.permits, err = q.ListPermits(ctx)
	if pgerr.IsUndefined(err) {
		return kindRows{}, nil
	}
	if err != nil {
		return k, err
	}
	if k.waiters, err = q.ListWaiters(ctx); pgerr.IsUndefined(err) {
		err = nil // a schema with the kinds but not yet their fair queues
	}
	if err != nil {
		return k, err
	}
	k.exclusive, err = q.ListExclusiveWaiters(ctx)
	return k, err
}

// permitKind names a permit row's kind as list shows it.
func permitKind(permits int32, exclusive bool) string {
	switch {
	case permits == 0 && exclusive:
		return "exclusive"
	case permits == 0:
		return "shared"
	}
	return "permit"
}

// kinds adds, after the mutex leases, the kinds' rows (kindRows); only,
// when not nil, limits it to that key (which may be "", a key another tool
// wrote). Each table is preceded by a blank line; nothing is added for what
// has no rows.
func (r *report) kinds(k kindRows, only *string) {
	var permits []row
	for _, p := range k.permits {
		if only != nil && p.LockKey != *only {
			continue
		}
		l := permitJSON(p)
		kind := l.Kind
		if kind == "permit" {
			kind = fmt.Sprintf("permit of %d", p.Permits)
		}
		flags := slices.Clone(l.Flags)
		shownKey, owner := termText(p.LockKey, &flags), termText(p.Owner, &flags)
		permits = append(permits, row{cells: []string{shownKey, kind, fmt.Sprint(p.Slot), owner, fmt.Sprint(p.Fence), state(l)}, flags: flags})
	}
	if len(permits) > 0 {
		r.b.WriteByte('\n')
		r.table([]string{"KEY", "KIND", "SLOT", "OWNER", "FENCE", "STATE"}, permits)
	}
	var waiters []row
	for _, w := range k.waiters {
		if only != nil && w.LockKey != *only {
			continue
		}
		flags := oddrow.WaiterFlags(w.LockKey, w.ExpiresAt, w.PlaceMicros)
		shownKey, owner := termText(w.LockKey, &flags), termText(w.Owner, &flags)
		waiters = append(waiters, row{cells: []string{shownKey, owner, fmt.Sprint(w.Position), w.Kind, placeLeft(w.DbNow, oddrow.Time{Time: w.ExpiresAt})}, flags: flags})
	}
	if len(waiters) > 0 {
		r.b.WriteByte('\n')
		r.table([]string{"KEY", "WAITER", "POSITION", "KIND", "PLACE EXPIRES IN"}, waiters)
	}
	for _, x := range k.exclusive {
		if only != nil && x.LockKey != *only {
			continue
		}
		var flags []oddrow.Flag
		shownKey := termText(x.LockKey, &flags)
		fmt.Fprintf(&r.b, "\n%s  %d exclusive waiter(s): no new shared lease is granted", shownKey, x.Waiting)
		if len(flags) > 0 {
			fmt.Fprintf(&r.b, "  (flags: %s)", r.flagged(flags))
		}
		r.b.WriteByte('\n')
	}
}

// permitJSON is a held permit or shared/exclusive lease as a list --json
// entry: its kind, slot, and permits for a semaphore.
func permitJSON(p fencesql.ListPermitsRow) leaseJSON {
	l := toJSON(p.LockKey, p.Owner, p.Fence, true, p.RemainingMicros, p.AcquiredAt, p.ExpiresAt, nil, p.DbNow)
	l.Kind = permitKind(p.Permits, p.Exclusive)
	slot := int(p.Slot)
	l.Slot = &slot
	if p.Permits > 0 {
		n := int(p.Permits)
		l.Permits = &n
	}
	return l
}

// kindsJSON are the kinds' rows as list --json entries: a held permit or
// shared/exclusive lease (kind, slot, and permits for a semaphore), and,
// unless heldOnly, each fair waiter (waiting, its queue kind and position;
// remaining_seconds and expires_at are its place's; it has no acquired_at).
func kindsJSON(k kindRows, heldOnly bool) []leaseJSON {
	var out []leaseJSON
	for _, p := range k.permits {
		out = append(out, permitJSON(p))
	}
	if heldOnly {
		return out
	}
	for _, w := range k.waiters {
		pos := int(w.Position)
		out = append(out, leaseJSON{Key: w.LockKey, Owner: w.Owner, Kind: w.Kind, Waiting: true, Position: &pos,
			RemainingSeconds: float64(w.PlaceMicros) / 1e6, ExpiresAt: oddrow.Time{Time: w.ExpiresAt.UTC()}, DBNow: w.DbNow.UTC(),
			Flags: oddrow.WaiterFlags(w.LockKey, w.ExpiresAt, w.PlaceMicros)})
	}
	return out
}
