package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
)

const listUsage = `Usage: pgfence list [--json] [--held]

Lists every lease row: key, owner, fence, and its state by the database's
clock (never this machine's): held (and the time left), released by its
holder, or expired (its holder stopped renewing: gone, stalled or cut off).
Then the held permits of semaphores and the shared/exclusive leases by key
and slot, and the waiters: fair (--wait) waiters of every kind in queue
order, and exclusive waiters. With --json, one array: each entry has a kind
("lease" for a plain, exclusive lease, "permit" or "shared"); a permit's has
its slot (and permits, the semaphore's number), a shared lease's its slot; a
fair waiter's has "waiting": true and its position in the key's queue (0
first), with remaining_seconds the time its place lasts. --held leaves the
waiters out.
`

const showUsage = `Usage: pgfence show [--json] KEY

Shows one lease: owner, fence, held, released or expired, time left (or
since the release or expiry) by the database's clock, acquired, expiry and
release times. Exits 1 if the key has
no lease row.
`

// leaseJSON is one lease in list --json and show --json output, or in list
// --json a permit or a fair waiter (kindsJSON).
type leaseJSON struct {
	Key string `json:"key"`
	// Kind is "lease" (a plain lease: the exclusive kind), "permit" (of a
	// semaphore of Permits permits) or "shared"; a waiter's is the kind it
	// asked for ("exclusive" for a plain lease).
	Kind             string     `json:"kind"`
	Owner            string     `json:"owner"`
	Fence            int64      `json:"fence"`
	Held             bool       `json:"held"`
	Released         bool       `json:"released"`
	Permits          *int       `json:"permits,omitempty"`
	Slot             *int       `json:"slot,omitempty"`
	Waiting          bool       `json:"waiting,omitempty"`
	Position         *int       `json:"position,omitempty"` // a waiter's place in its key's queue, 0 first
	RemainingSeconds float64    `json:"remaining_seconds"`
	AcquiredAt       *time.Time `json:"acquired_at,omitempty"`
	ExpiresAt        time.Time  `json:"expires_at"`
	ReleasedAt       *time.Time `json:"released_at,omitempty"`
	DBNow            time.Time  `json:"db_now"`
}

// toJSON is one lease row as the output shows it. released is when the
// holder released it (nil: held, or ran out).
func toJSON(key, owner string, fence int64, held bool, remainingMicros int64, acquired, expires time.Time, released *time.Time, now time.Time) leaseJSON {
	acquired = acquired.UTC()
	l := leaseJSON{Key: key, Kind: "lease", Owner: owner, Fence: fence, Held: held,
		RemainingSeconds: float64(remainingMicros) / 1e6,
		AcquiredAt:       &acquired, ExpiresAt: expires.UTC(), DBNow: now.UTC()}
	if released != nil && !held {
		at := released.UTC()
		l.Released, l.ReleasedAt = true, &at
	}
	return l
}

// state says "held, 12.3s left", "released 4s ago" (by its holder) or
// "expired 4s ago" (its holder stopped renewing), by the database clock.
func state(l leaseJSON) string {
	switch {
	case l.Held:
		return fmt.Sprintf("held, %v left", roundDur(time.Duration(l.RemainingSeconds*1e6)*time.Microsecond))
	case l.Released:
		return fmt.Sprintf("released %v ago", roundDur(l.DBNow.Sub(*l.ReleasedAt)))
	}
	return fmt.Sprintf("expired %v ago (not released: its holder stopped renewing)", roundDur(l.DBNow.Sub(l.ExpiresAt)))
}

func roundDur(d time.Duration) time.Duration {
	if d > time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

func (a *app) cmdList(ctx context.Context, args []string) error {
	var url string
	var asJSON, heldOnly bool
	fs := a.newFlags("list", listUsage, &url)
	fs.BoolVar(&asJSON, "json", false, "print a JSON array")
	fs.BoolVar(&heldOnly, "held", false, "only leases that are held now")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fail(exitUsage, "pgfence list: unexpected argument %q (did you mean pgfence show %s?)", pos[0], pos[0])
	}
	pool, where, err := a.connect(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	rows, err := a.queries(pool).ListLeases(ctx)
	if err != nil {
		return dbError(where, err)
	}
	out := []leaseJSON{}
	for _, r := range rows {
		if heldOnly && !r.Held || r.Kind != "exclusive" {
			// A key's row of another kind only summarises the key's shared
			// holders or permits, which are listed one by one below.
			continue
		}
		out = append(out, toJSON(r.LockKey, r.Owner, r.Fence, r.Held, r.RemainingMicros, r.AcquiredAt, r.ExpiresAt, r.ReleasedAt, r.DbNow))
	}
	if asJSON {
		k, err := a.readKinds(ctx, pool)
		if err != nil {
			return dbError(where, err)
		}
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(append(out, kindsJSON(k, heldOnly)...))
	}
	if len(out) == 0 {
		fmt.Fprintln(a.stdout, noLeases(heldOnly, len(rows)))
	} else {
		tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "KEY\tOWNER\tFENCE\tSTATE")
		for _, l := range out {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", l.Key, l.Owner, l.Fence, state(l))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if err := a.listKinds(ctx, pool, a.stdout, ""); err != nil {
		return dbError(where, err)
	}
	return nil
}

// noLeases says what an empty listing found: no rows at all, or only rows
// whose leases have expired (release keeps the row; see SweepExpired).
func noLeases(heldOnly bool, rows int) string {
	switch {
	case rows == 0:
		return "no leases: the table has no rows"
	case heldOnly && rows == 1:
		return "no lease is held now (1 expired or released row; pgfence list shows it)"
	case heldOnly:
		return fmt.Sprintf("no lease is held now (%d expired or released rows; pgfence list shows them)", rows)
	}
	return "no leases"
}

func (a *app) cmdShow(ctx context.Context, args []string) error {
	var url string
	var asJSON bool
	fs := a.newFlags("show", showUsage, &url)
	fs.BoolVar(&asJSON, "json", false, "print a JSON object")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fail(exitUsage, "pgfence show: give exactly one KEY (got %d arguments)", len(pos))
	}
	key := pos[0]
	pool, where, err := a.connect(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	r, err := a.queries(pool).GetLease(ctx, key)
	if err == nil && r.Kind != "exclusive" && !asJSON {
		err = pgx.ErrNoRows // held shared or as permits: its holders are listed one by one
	}
	if errors.Is(err, pgx.ErrNoRows) && !asJSON {
		// Perhaps a semaphore or shared/exclusive key, or a key waited for.
		var b strings.Builder
		if err := a.listKinds(ctx, pool, &b, key); err != nil {
			return dbError(where, err)
		}
		if b.Len() > 0 {
			fmt.Fprint(a.stdout, strings.TrimPrefix(b.String(), "\n"))
			return nil
		}
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fail(exitFailed, "pgfence: no lease row for %q (never acquired, or swept)", key)
	}
	if err != nil {
		return dbError(where, err)
	}
	l := toJSON(r.LockKey, r.Owner, r.Fence, r.Held, r.RemainingMicros, r.AcquiredAt, r.ExpiresAt, r.ReleasedAt, r.DbNow)
	if r.Kind != "exclusive" {
		l.Kind = r.Kind // the key's row of a key held shared or as permits
	}
	if asJSON {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(l)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "key\t%s\n", l.Key)
	fmt.Fprintf(tw, "owner\t%s\n", l.Owner)
	fmt.Fprintf(tw, "fence\t%d\n", l.Fence)
	fmt.Fprintf(tw, "state\t%s (database clock)\n", state(l))
	fmt.Fprintf(tw, "acquired at\t%s\n", l.AcquiredAt.Format(time.RFC3339Nano))
	fmt.Fprintf(tw, "expires at\t%s\n", l.ExpiresAt.Format(time.RFC3339Nano))
	if l.ReleasedAt != nil {
		fmt.Fprintf(tw, "released at\t%s\n", l.ReleasedAt.Format(time.RFC3339Nano))
	}
	fmt.Fprintf(tw, "database now\t%s\n", l.DBNow.Format(time.RFC3339Nano))
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := a.listKinds(ctx, pool, a.stdout, key); err != nil {
		return dbError(where, err)
	}
	return nil
}
