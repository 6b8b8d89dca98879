package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

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

// listKinds writes, after the mutex leases, the kinds' rows (kindRows);
// key, when not empty, limits it to that key. It writes nothing for what
// has no rows.
func (a *app) listKinds(ctx context.Context, pool *pgxpool.Pool, w io.Writer, key string) error {
	k, err := a.readKinds(ctx, pool)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := false
	for _, p := range k.permits {
		if key != "" && p.LockKey != key {
			continue
		}
		if !header {
			fmt.Fprintln(tw, "\nKEY\tKIND\tSLOT\tOWNER\tFENCE\tSTATE")
			header = true
		}
		kind := permitKind(p.Permits, p.Exclusive)
		if kind == "permit" {
			kind = fmt.Sprintf("permit of %d", p.Permits)
		}
		left := roundDur(time.Duration(p.RemainingMicros) * time.Microsecond)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\theld, %v left\n", p.LockKey, kind, p.Slot, p.Owner, p.Fence, left)
	}
	header = false
	for _, wt := range k.waiters {
		if key != "" && wt.LockKey != key {
			continue
		}
		if !header {
			fmt.Fprintln(tw, "\nKEY\tWAITER\tPOSITION\tKIND\tPLACE EXPIRES IN")
			header = true
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%v\n", wt.LockKey, wt.Owner, wt.Position, wt.Kind, roundDur(time.Duration(wt.PlaceMicros)*time.Microsecond))
	}
	for _, x := range k.exclusive {
		if key != "" && x.LockKey != key {
			continue
		}
		fmt.Fprintf(tw, "\n%s\t%d exclusive waiter(s): no new shared lease is granted\n", x.LockKey, x.Waiting)
	}
	return tw.Flush()
}

// kindsJSON are the kinds' rows as list --json entries: a held permit or
// shared/exclusive lease (kind, slot, and permits for a semaphore), and,
// unless heldOnly, each fair waiter (waiting, its queue kind and position;
// remaining_seconds and expires_at are its place's; it has no acquired_at).
func kindsJSON(k kindRows, heldOnly bool) []leaseJSON {
	var out []leaseJSON
	for _, p := range k.permits {
		l := toJSON(p.LockKey, p.Owner, p.Fence, true, p.RemainingMicros, p.AcquiredAt, p.ExpiresAt, nil, p.DbNow)
		l.Kind = permitKind(p.Permits, p.Exclusive)
		slot := int(p.Slot)
		l.Slot = &slot
		if p.Permits > 0 {
			n := int(p.Permits)
			l.Permits = &n
		}
		out = append(out, l)
	}
	if heldOnly {
		return out
	}
	for _, w := range k.waiters {
		pos := int(w.Position)
		out = append(out, leaseJSON{Key: w.LockKey, Owner: w.Owner, Kind: w.Kind, Waiting: true, Position: &pos,
			RemainingSeconds: float64(w.PlaceMicros) / 1e6, ExpiresAt: w.ExpiresAt.UTC(), DBNow: w.DbNow.UTC()})
	}
	return out
}
