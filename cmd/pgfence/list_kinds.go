package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/internal/pgerr"
)

// listKinds writes, after the mutex leases, the unexpired permits of
// semaphores and the shared/exclusive leases (by key and slot), and the
// waiters in queue order: fair waiters of mutex leases by position, and the
// exclusive waiters per key. key, when not empty, limits it to that key. It
// writes nothing for what has no rows, and nothing at all on a schema from
// before these kinds.
func (a *app) listKinds(ctx context.Context, pool *pgxpool.Pool, w io.Writer, key string) error {
	q := a.own(pool)
	permits, err := q.ListPermits(ctx)
	if pgerr.IsUndefined(err) {
		return nil
	}
	if err != nil {
		return err
	}
	waiters, err := q.ListWaiters(ctx)
	if err != nil {
		return err
	}
	exclusive, err := q.ListExclusiveWaiters(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := false
	for _, p := range permits {
		if key != "" && p.LockKey != key {
			continue
		}
		if !header {
			fmt.Fprintln(tw, "\nKEY\tKIND\tSLOT\tOWNER\tFENCE\tSTATE")
			header = true
		}
		kind := fmt.Sprintf("permit of %d", p.Permits)
		switch {
		case p.Permits == 0 && p.Exclusive:
			kind = "exclusive"
		case p.Permits == 0:
			kind = "shared"
		}
		left := roundDur(time.Duration(p.RemainingMicros) * time.Microsecond)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\theld, %v left\n", p.LockKey, kind, p.Slot, p.Owner, p.Fence, left)
	}
	header = false
	for _, wt := range waiters {
		if key != "" && wt.LockKey != key {
			continue
		}
		if !header {
			fmt.Fprintln(tw, "\nKEY\tWAITER\tPOSITION\tPLACE EXPIRES IN")
			header = true
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%v\n", wt.LockKey, wt.Owner, wt.Position, roundDur(time.Duration(wt.PlaceMicros)*time.Microsecond))
	}
	for _, x := range exclusive {
		if key != "" && x.LockKey != key {
			continue
		}
		fmt.Fprintf(tw, "\n%s\t%d exclusive waiter(s): no new shared lease is granted\n", x.LockKey, x.Waiting)
	}
	return tw.Flush()
}
