package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/cmd/pgfence/internal/oddrow"
)

const listUsage = `Usage: pgfence list [--json] [--held]

Lists every plain (exclusive) lease row: key, owner, fence, and its state
by the database's clock (never this machine's): held (and the time left),
released by its holder, or expired (its holder stopped renewing: gone,
stalled or cut off). Then the held permits of semaphores and the shared
leases by key and slot, and the waiters: fair (--wait) waiters of every
kind in queue order, and exclusive waiters that keep new shared leases and
permits out. With --json, one array: each entry has a kind ("lease",
"permit" or "shared"; a waiter's is the kind it asked for, "exclusive" for
a plain lease); a permit's has its slot (and permits, the semaphore's
number), a shared lease's its slot; a fair waiter's has "waiting": true and
its position in the key's queue (0 first), with remaining_seconds the time
its place lasts. --held leaves the waiters out.

A row that pgfence's clients do not write (an infinite or far-future
expiry, an acquisition after its expiry, a huge fence; written by another
tool) is shown with flags, explained at the end; a key or owner with
characters a terminal would act on is shown Go-quoted (flag escaped). With
--json, "flags" lists them, and an infinite time is "infinity".
`

const showUsage = `Usage: pgfence show [--json] KEY

Shows one lease: owner, fence, held, released or expired, time left (or
since the release or expiry) by the database's clock, acquired, expiry and
release times, and the flags of a row pgfence's clients do not write (see
pgfence list -h). Exits 1 if the key has no lease row.
`

// leaseJSON is one lease in list --json and show --json output, or in list
// --json a permit or a fair waiter (kindsJSON).
type leaseJSON struct {
	Key string `json:"key"`
	// Kind is "lease" (a plain lease: the exclusive kind), "permit" (of a
	// semaphore of Permits permits) or "shared"; a waiter's is the kind it
	// asked for ("exclusive" for a plain lease).
	Kind     string `json:"kind"`
	Owner    string `json:"owner"`
	Fence    int64  `json:"fence"`
	Held     bool   `json:"held"`
	Released bool   `json:"released"`
	Permits  *int   `json:"permits,omitempty"`
	Slot     *int   `json:"slot,omitempty"`
	Waiting  bool   `json:"waiting,omitempty"`
	Position *int   `json:"position,omitempty"` // a waiter's place in its key's queue, 0 first
	// RemainingSeconds of an infinite expiry is the queries' saturated
	// time left (oddrow.MaxMicros), about 292 years: a number still.
	RemainingSeconds float64      `json:"remaining_seconds"`
	AcquiredAt       *oddrow.Time `json:"acquired_at,omitempty"`
	ExpiresAt        oddrow.Time  `json:"expires_at"`
	ReleasedAt       *oddrow.Time `json:"released_at,omitempty"`
	DBNow            time.Time    `json:"db_now"`
	// Flags say what is odd about a row pgfence's clients do not write
	// (oddrow); absent for the others.
	Flags []oddrow.Flag `json:"flags,omitempty"`
}

// toJSON is one lease row as the output shows it. released is when the
// holder released it (nil: held, or ran out).
func toJSON(key, owner string, fence int64, held bool, remainingMicros int64, acquired, expires time.Time, released *time.Time, now time.Time) leaseJSON {
	l := leaseJSON{Key: key, Kind: "lease", Owner: owner, Fence: fence, Held: held,
		RemainingSeconds: float64(remainingMicros) / 1e6,
		AcquiredAt:       &oddrow.Time{Time: acquired.UTC()}, ExpiresAt: oddrow.Time{Time: expires.UTC()}, DBNow: now.UTC(),
		Flags: oddrow.Row{Key: key, Fence: fence, Acquired: acquired, Expires: expires, RemainingMicros: remainingMicros, Now: now}.Flags()}
	if released != nil && !held {
		l.Released, l.ReleasedAt = true, &oddrow.Time{Time: released.UTC()}
	}
	return l
}

// state says "held, 12.3s left", "released 4s ago" (by its holder) or
// "expired 4s ago" (its holder stopped renewing), by the database clock;
// or what an infinite expiry means.
func state(l leaseJSON) string {
	switch {
	case l.Held && l.ExpiresAt.Equal(oddrow.Infinity):
		return "held, never expires (expiry infinity)"
	case l.Held:
		return "held, " + span(l.DBNow, l.ExpiresAt.Time) + " left"
	case l.Released:
		return "released " + ago(l.DBNow, *l.ReleasedAt)
	case l.ExpiresAt.Equal(oddrow.MinusInfinity):
		return "expired, never held (expiry -infinity)"
	}
	return "expired " + ago(l.DBNow, l.ExpiresAt) + " (not released: its holder stopped renewing)"
}

// placeLeft is how long a waiter's place lasts from now.
func placeLeft(now time.Time, expires oddrow.Time) string {
	if expires.Equal(oddrow.Infinity) {
		return "never (infinity)"
	}
	return span(now, expires.Time)
}

// ago says how long before now t was, or when t is if not before now.
func ago(now time.Time, t oddrow.Time) string {
	switch {
	case t.Infinite():
		return "at " + t.String()
	case t.After(now):
		return "at " + t.String() + ", in the future"
	}
	return span(t.Time, now) + " ago"
}

// span is the time from one instant to a later one, rounded; in years
// where it is beyond a time.Duration (about 292 years), as a far-future
// or far-past timestamp a row may carry is.
func span(from, to time.Time) string {
	if d := to.Sub(from); d != math.MaxInt64 && d != math.MinInt64 {
		return roundDur(d).String()
	}
	return fmt.Sprintf("about %d years", to.Year()-from.Year())
}

func roundDur(d time.Duration) time.Duration {
	if d > time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

// report is the text output of list or show, built whole and written at
// once: a read that fails leaves nothing half written.
type report struct {
	b    bytes.Buffer
	used []oddrow.Flag // the flags shown, for the legend
}

// row is one row of a report's table; flags, when any, go in a last
// FLAGS column.
type row struct {
	cells []string
	flags []oddrow.Flag
}

// termText is a key or owner as the terminal may show it (oddrow.Text); an
// escaped one adds oddrow.Escaped to flags.
func termText(s string, flags *[]oddrow.Flag) string {
	shown, escaped := oddrow.Text(s)
	if escaped && !slices.Contains(*flags, oddrow.Escaped) {
		*flags = append(*flags, oddrow.Escaped)
	}
	return shown
}

// flagged notes flags for the legend and returns them as a cell.
func (r *report) flagged(flags []oddrow.Flag) string {
	for _, f := range flags {
		if !slices.Contains(r.used, f) {
			r.used = append(r.used, f)
		}
	}
	names := make([]string, len(flags))
	for i, f := range flags {
		names[i] = string(f)
	}
	return strings.Join(names, ",")
}

// table adds a table: the header, then the rows, aligned; a FLAGS column
// when a row has flags. Nothing for no rows.
func (r *report) table(header []string, rows []row) {
	if len(rows) == 0 {
		return
	}
	anyFlags := slices.ContainsFunc(rows, func(x row) bool { return len(x.flags) > 0 })
	if anyFlags {
		header = append(slices.Clip(header), "FLAGS")
	}
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, x := range rows {
		cells := x.cells
		if anyFlags {
			cells = append(slices.Clip(cells), r.flagged(x.flags))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	tw.Flush()
	r.trimmed(b.Bytes())
}

// trimmed adds lines without the padding tabwriter leaves after an empty
// last cell.
func (r *report) trimmed(b []byte) {
	for line := range bytes.Lines(b) {
		r.b.Write(bytes.TrimRight(line, " \n"))
		r.b.WriteByte('\n')
	}
}

// legend explains, once and last, each flag the report showed.
func (r *report) legend() {
	if len(r.used) == 0 {
		return
	}
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nFLAGS: what is unusual about a row (it is shown as the database has it)")
	for _, f := range oddrow.Flags {
		if slices.Contains(r.used, f) {
			fmt.Fprintf(tw, "  %s\t%s\n", f, f.Note())
		}
	}
	tw.Flush()
	r.b.Write(b.Bytes())
}

// writeTo writes the report, legend last.
func (r *report) writeTo(w io.Writer) error {
	r.legend()
	_, err := w.Write(r.b.Bytes())
	return err
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
	// Everything is read before anything is written.
	rows, err := a.queries(pool).ListLeases(ctx)
	if err != nil {
		return dbError(where, err)
	}
	k, err := a.readKinds(ctx, pool)
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
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(append(out, kindsJSON(k, heldOnly)...))
	}
	var r report
	if len(out) == 0 {
		fmt.Fprintln(&r.b, noLeases(heldOnly, len(rows)))
	}
	var table []row
	for _, l := range out {
		flags := slices.Clone(l.Flags)
		key, owner := termText(l.Key, &flags), termText(l.Owner, &flags)
		table = append(table, row{cells: []string{key, owner, fmt.Sprint(l.Fence), state(l)}, flags: flags})
	}
	r.table([]string{"KEY", "OWNER", "FENCE", "STATE"}, table)
	r.kinds(k, nil)
	return r.writeTo(a.stdout)
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
	lease, err := a.queries(pool).GetLease(ctx, key)
	if err == nil && lease.Kind != "exclusive" && !asJSON {
		err = pgx.ErrNoRows // held shared or as permits: its holders are listed one by one
	}
	if errors.Is(err, pgx.ErrNoRows) && !asJSON {
		// Perhaps a semaphore or shared/exclusive key, or a key waited for.
		k, err := a.readKinds(ctx, pool)
		if err != nil {
			return dbError(where, err)
		}
		var r report
		r.kinds(k, &key)
		if r.b.Len() > 0 {
			r.b.Next(1) // the blank line that separates it from a lease
			return r.writeTo(a.stdout)
		}
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fail(exitFailed, "pgfence: no lease row for %q (never acquired, or swept)", key)
	}
	if err != nil {
		return dbError(where, err)
	}
	l := toJSON(lease.LockKey, lease.Owner, lease.Fence, lease.Held, lease.RemainingMicros, lease.AcquiredAt, lease.ExpiresAt, lease.ReleasedAt, lease.DbNow)
	if lease.Kind != "exclusive" {
		l.Kind = lease.Kind // the key's row of a key held shared or as permits
	}
	if asJSON {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(l)
	}
	k, err := a.readKinds(ctx, pool)
	if err != nil {
		return dbError(where, err)
	}
	var r report
	flags := slices.Clone(l.Flags)
	lines := [][2]string{
		{"key", termText(l.Key, &flags)},
		{"owner", termText(l.Owner, &flags)},
		{"fence", fmt.Sprint(l.Fence)},
		{"state", state(l) + " (database clock)"},
		{"acquired at", l.AcquiredAt.String()},
		{"expires at", l.ExpiresAt.String()},
	}
	if l.ReleasedAt != nil {
		lines = append(lines, [2]string{"released at", l.ReleasedAt.String()})
	}
	lines = append(lines, [2]string{"database now", l.DBNow.Format(time.RFC3339Nano)})
	if len(flags) > 0 {
		lines = append(lines, [2]string{"flags", r.flagged(flags)})
	}
	tw := tabwriter.NewWriter(&r.b, 0, 0, 2, ' ', 0)
	for _, line := range lines {
		fmt.Fprintf(tw, "%s\t%s\n", line[0], line[1])
	}
	tw.Flush()
	r.kinds(k, &key)
	return r.writeTo(a.stdout)
}
