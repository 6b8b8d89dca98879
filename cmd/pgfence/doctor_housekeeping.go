package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/pgfence/pgfence/cmd/pgfence/internal/oddrow"
	"github.com/pgfence/pgfence/internal/validate"
)

// ageMicros is the SQL of now() - ts in microseconds, for any timestamptz a
// row may hold: NULL stays NULL, -infinity and ages beyond a Go duration
// saturate at oddrow.MaxMicros, infinity (and any future) reads 0.
// Subtracting an infinite timestamp is an error in PostgreSQL, so isfinite
// is asked first.
func ageMicros(ts string) string {
	return fmt.Sprintf("(CASE WHEN %[1]s IS NULL THEN NULL WHEN isfinite(%[1]s) THEN "+
		"LEAST(GREATEST(extract(epoch FROM now() - %[1]s) * 1000000, 0), %[2]d) "+
		"WHEN %[1]s < now() THEN %[2]d ELSE 0 END)::bigint", ts, oddrow.MaxMicros)
}

// age writes a duration for a finding: rounded to what matters at its size,
// "292 years or more" where it saturated.
func age(us int64) string {
	d := oddrow.Micros(us)
	switch {
	case us >= oddrow.MaxMicros:
		return "292 years or more"
	case d >= 48*time.Hour:
		return fmt.Sprintf("%.1f days", d.Hours()/24)
	case d >= time.Minute:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}

// hours writes a whole number of hours: "24 h".
func hours(d time.Duration) string { return fmt.Sprintf("%g h", d.Hours()) }

// keyText is a key as a finding shows it: escaped as pgfence list shows
// it, and cut short past 64 bytes (a key may be 512).
func keyText(key string) string {
	shown, _ := oddrow.Text(key)
	if len(shown) > 64 {
		return shown[:61] + "..."
	}
	return shown
}

// sweepDo is what deletes expired rows and old tombstones.
const sweepDo = "run pglease's Client.SweepExpired(ctx, time.Hour) now and then (hourly, say) in one of your services; docs/operations.md, Deleting old rows"

func checkSweep(ctx context.Context, d *doctor) error {
	if d.schema == "" {
		return nil
	}
	var waiting, expired int64
	var oldest *int64
	err := d.db().QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FILTER (WHERE expires_at < now() - $1::bigint * interval '1 microsecond'),
	        count(*) FILTER (WHERE expires_at <= now()), %s
	   FROM %s`, ageMicros("min(expires_at) FILTER (WHERE expires_at <= now())"), d.table("lock_leases")),
		sweepAge.Microseconds()).Scan(&waiting, &expired, &oldest)
	if err != nil {
		return d.readFailed("sweep", "the expired lease rows", err)
	}
	f := finding{Check: "sweep", Status: statusOK,
		Read: fmt.Sprintf("%d expired or released lease rows, %d of them over %s ago", expired, waiting, hours(sweepAge))}
	if oldest != nil {
		f.Read += ", the oldest expired " + age(*oldest) + " ago"
	}
	f.Title = fmt.Sprintf("%d lease rows wait for a sweep (warns above %d)", waiting, sweepWarnRows)
	if waiting > sweepWarnRows {
		f.Status = statusWarn
		f.Title = fmt.Sprintf("%d lease rows expired over %s ago wait for a sweep: nothing sweeps them, or not often enough", waiting, hours(sweepAge))
		f.Do = sweepDo
	}
	d.add(f)
	return nil
}

func checkLeases(ctx context.Context, d *doctor) error {
	if d.schema == "" {
		return nil
	}
	// A key's holders: an exclusive holder in the key's own row (slot 0),
	// shared holders and permits in slots 1 and up; a shared or permit
	// key's slot 0 is its summary, not a holder.
	var held, never int64
	var key, owner *string
	var oldest *int64
	err := d.db().QueryRow(ctx, fmt.Sprintf(`WITH h AS (
	  SELECT lock_key, owner, acquired_at, expires_at FROM %s
	   WHERE expires_at > now() AND (slot > 0 OR kind = 'exclusive'))
	SELECT (SELECT count(*) FROM h),
	       (SELECT count(*) FROM h WHERE expires_at > now() + $1::bigint * interval '1 microsecond'),
	       o.lock_key, o.owner, %s
	  FROM (SELECT 1) AS one
	  LEFT JOIN LATERAL (SELECT * FROM h ORDER BY acquired_at, lock_key LIMIT 1) AS o ON true`,
		d.table("lock_leases"), ageMicros("o.acquired_at")), validate.MaxTTL.Microseconds()).
		Scan(&held, &never, &key, &owner, &oldest)
	if err != nil {
		return d.readFailed("leases", "the held leases", err)
	}
	f := finding{Check: "leases", Status: statusOK, Title: fmt.Sprintf("%d leases held", held),
		Read: fmt.Sprintf("%d held (by the database clock), %d expiring beyond pgfence's longest TTL (%s)", held, never, hours(validate.MaxTTL))}
	if key != nil {
		f.Read += fmt.Sprintf("; the oldest held: %s by %s, acquired %s ago", keyText(*key), keyText(*owner), age(*oldest))
	}
	if never > 0 {
		f.Status = statusWarn
		f.Title = fmt.Sprintf("%d leases expire beyond pgfence's longest TTL or never (expires_at infinity): written by hand or another tool, nobody's crash frees them", never)
		f.Do = "pgfence list shows them (flags expires-infinity, expires-far); release them once their holder is known to be gone"
	}
	d.add(f)
	return nil
}

func checkQueues(ctx context.Context, d *doctor) error {
	if d.schema == "" {
		return nil
	}
	rows, err := d.db().Query(ctx, fmt.Sprintf(`SELECT lock_key, count(*), count(*) OVER (), sum(count(*)) OVER ()::bigint
	   FROM %s WHERE expires_at > now()
	  GROUP BY lock_key ORDER BY count(*) DESC, lock_key LIMIT $1`, d.table("pgfence_waiters")), deepestQueues)
	if err != nil {
		return d.readFailed("queues", "the fair waiters' queues", err)
	}
	var deepest []string
	var keys, waiters int64
	for rows.Next() {
		var key string
		var n int64
		if err := rows.Scan(&key, &n, &keys, &waiters); err != nil {
			rows.Close()
			return d.readFailed("queues", "the fair waiters' queues", err)
		}
		deepest = append(deepest, fmt.Sprintf("%s: %d", keyText(key), n))
	}
	if err := rows.Err(); err != nil {
		return d.readFailed("queues", "the fair waiters' queues", err)
	}
	f := finding{Check: "queues", Status: statusOK, Title: fmt.Sprintf("%d waiters in the queues of %d keys", waiters, keys),
		Read: "no fair waiter waits"}
	if len(deepest) > 0 {
		f.Read = "the deepest queues: " + strings.Join(deepest, ", ")
	}
	d.add(f)
	return nil
}

func checkTombstones(ctx context.Context, d *doctor) error {
	if d.schema == "" {
		return nil
	}
	// A member of pgfence_client may not read the tombstones, by design:
	// an owner token settles an ambiguous acquisition and stays secret.
	// That is the documented setup, not a finding to warn about.
	var readable bool
	if err := d.db().QueryRow(ctx, "SELECT has_table_privilege($1, 'SELECT')", d.table("pgfence_abandoned_tokens")).Scan(&readable); err == nil && !readable {
		d.add(finding{Check: "tombstones", Status: statusOK,
			Title: "the tombstones of ambiguous acquisitions are the owner's to read (a pgfence_client member never reads them)",
			Read:  "no SELECT on pgfence_abandoned_tokens for this role",
			Do:    "run pgfence doctor as the schema's owner to count them"})
		return nil
	}
	var n, old int64
	var oldest *int64
	err := d.db().QueryRow(ctx, fmt.Sprintf(`SELECT count(*), count(*) FILTER (WHERE abandoned_at < now() - $1::bigint * interval '1 microsecond'), %s
	   FROM %s`, ageMicros("min(abandoned_at)"), d.table("pgfence_abandoned_tokens")), tombstoneWarnAge.Microseconds()).Scan(&n, &old, &oldest)
	if err != nil {
		return d.readFailed("tombstones", "the tombstones of ambiguous acquisitions", err)
	}
	f := finding{Check: "tombstones", Status: statusOK,
		Title: fmt.Sprintf("%d tombstones of acquisitions whose answer was lost", n),
		Read:  fmt.Sprintf("%d rows in pgfence_abandoned_tokens, %d older than %s", n, old, hours(tombstoneWarnAge))}
	if oldest != nil {
		f.Read += ", the oldest " + age(*oldest) + " old"
	}
	if old > 0 {
		f.Status = statusWarn
		f.Title = fmt.Sprintf("%d tombstones older than %s: SweepExpired deletes them after an hour, so nothing sweeps", old, hours(tombstoneWarnAge))
		f.Do = sweepDo
	}
	d.add(f)
	return nil
}
