// Package oddrow is how list, show and serve read and show the rows that
// pgfence's clients never write but a role that may write its tables (or
// another tool) can: an infinite or far-future expiry, an acquisition after
// its expiry or in the future, a fence of 2^53 or more, or of 0 or less, a
// key pglease refuses, a key or owner with characters a terminal acts on.
// Such a row is shown, with flags that say what is odd about it, rather
// than failing the command or the page.
package oddrow

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pgfence/pgfence/internal/validate"
)

// Infinity and MinusInfinity are the timestamps 'infinity' and '-infinity'
// as the queries read them: PostgreSQL's largest and smallest finite
// timestamptz, since pgx scans no infinite timestamp into a time.Time.
var (
	Infinity      = time.Date(294276, time.December, 31, 23, 59, 59, 999999000, time.UTC)
	MinusInfinity = time.Date(-4713, time.November, 24, 0, 0, 0, 0, time.UTC) // 4714 BC
)

// MaxMicros is where the queries saturate a time left: the longest
// time.Duration in microseconds (about 292 years). An infinite expiry's
// time left reads as it.
const MaxMicros = math.MaxInt64 / int64(time.Microsecond)

// Micros is a time left in microseconds as a Duration, saturated at
// MaxMicros either way, so that no figure a row carries overflows it.
func Micros(us int64) time.Duration {
	return time.Duration(min(max(us, -MaxMicros), MaxMicros)) * time.Microsecond
}

// Time is a timestamp as the JSON outputs write it: RFC 3339 in UTC as
// time.Time writes it, "infinity" or "-infinity" (PostgreSQL's spelling) for
// Infinity and MinusInfinity, and a year beyond 9999 or before 0 with its
// digits, as PostgreSQL's to_json writes it (time.Time's MarshalJSON refuses
// such a year, and the whole output with it).
type Time struct{ time.Time }

// Infinite reports whether t is Infinity or MinusInfinity.
func (t Time) Infinite() bool { return t.Equal(Infinity) || t.Equal(MinusInfinity) }

// String is t as the outputs write it.
func (t Time) String() string {
	switch {
	case t.Equal(Infinity):
		return "infinity"
	case t.Equal(MinusInfinity):
		return "-infinity"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// MarshalJSON writes t as String does.
func (t Time) MarshalJSON() ([]byte, error) { return json.Marshal(t.String()) }

// UnmarshalJSON reads what MarshalJSON writes.
func (t *Time) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	switch s {
	case "infinity":
		t.Time = Infinity
		return nil
	case "-infinity":
		t.Time = MinusInfinity
		return nil
	}
	// time.Parse reads four-digit years only: read the year apart and the
	// rest with a leap year in its place.
	if i := strings.IndexByte(s[min(1, len(s)):], '-') + 1; i > 0 && (i != 4 || s[0] == '-') {
		year, err := strconv.Atoi(s[:i])
		if err != nil {
			return &time.ParseError{Layout: time.RFC3339Nano, Value: s, Message: ": bad year"}
		}
		p, err := time.Parse(time.RFC3339Nano, "2000"+s[i:])
		if err != nil {
			return err
		}
		t.Time = p.AddDate(year-2000, 0, 0)
		return nil
	}
	p, err := time.Parse(time.RFC3339Nano, s)
	t.Time = p
	return err
}

// Flag names one oddity of a row, in list's FLAGS column and the "flags"
// of the JSON outputs.
type Flag string

const (
	ExpiresInfinity      Flag = "expires-infinity"
	ExpiresMinusInfinity Flag = "expires-minus-infinity"
	ExpiresFar           Flag = "expires-far"
	AcquiredAfterExpiry  Flag = "acquired-after-expiry"
	AcquiredInFuture     Flag = "acquired-in-future"
	AcquiredInfinite     Flag = "acquired-infinite"
	FenceHuge            Flag = "fence-huge"
	FenceNotPositive     Flag = "fence-not-positive"
	KeyRefused           Flag = "key-refused"
	// Escaped is the terminal's alone: the JSON outputs carry the text as
	// it is, and the page shows it escaped by the same rule.
	Escaped Flag = "escaped"
)

// Flags lists every flag, in the order a legend shows them.
var Flags = []Flag{ExpiresInfinity, ExpiresMinusInfinity, ExpiresFar, AcquiredAfterExpiry, AcquiredInFuture,
	AcquiredInfinite, FenceHuge, FenceNotPositive, KeyRefused, Escaped}

var notes = map[Flag]string{
	ExpiresInfinity:      "expires_at is 'infinity': held until its holder releases it, it never expires",
	ExpiresMinusInfinity: "expires_at is '-infinity': it was never held",
	ExpiresFar:           "expires more than " + strconv.Itoa(int(validate.MaxTTL.Hours())) + "h from now, beyond pgfence's longest TTL (or never, where the expiry is not read)",
	AcquiredAfterExpiry:  "acquired_at is later than expires_at",
	AcquiredInFuture:     "acquired_at is later than the database's now",
	AcquiredInfinite:     "acquired_at is 'infinity' or '-infinity'",
	FenceHuge:            "fence of 2^53 or more: exact here and in the JSON, rounded in the Prometheus metrics",
	FenceNotPositive:     "fence of 0 or less: pgfence never draws one",
	KeyRefused:           "a key pglease refuses (empty, or over " + strconv.Itoa(validate.MaxKeyBytes) + " bytes): no pgfence client can take or release it",
	Escaped:              "key or owner shown as a Go-quoted string: it holds characters a terminal would act on or hide (control characters, escape sequences, bidirectional marks)",
}

// Note says what f means, for the legend shown once under a table.
func (f Flag) Note() string { return notes[f] }

// Row is what the flags of a lease row (a mutex lease, a permit, a shared
// or exclusive lease) are computed from, as the queries read it.
type Row struct {
	Key   string
	Fence int64
	// Acquired and Expires are zero where the row's read has no such
	// column (serve reads a permit holder's time left only): not checked.
	Acquired, Expires time.Time
	RemainingMicros   int64
	Now               time.Time // the database's
}

// Flags are r's oddities; nil for a row as pgfence writes them.
func (r Row) Flags() []Flag {
	f := keyFlags(r.Key)
	switch {
	case r.Fence >= 1<<53:
		f = append(f, FenceHuge)
	case r.Fence <= 0:
		f = append(f, FenceNotPositive)
	}
	f = append(f, expiryFlags(r.Expires, r.RemainingMicros)...)
	if r.Acquired.IsZero() {
		return f
	}
	if (Time{r.Acquired}).Infinite() {
		f = append(f, AcquiredInfinite)
	}
	if r.Acquired.After(r.Now) {
		f = append(f, AcquiredInFuture)
	}
	if !r.Expires.IsZero() && !r.Expires.Equal(MinusInfinity) && r.Acquired.After(r.Expires) {
		f = append(f, AcquiredAfterExpiry)
	}
	return f
}

// WaiterFlags are the oddities of a waiter's row: its key, and when its
// place expires (expires zero where the read has no such column).
func WaiterFlags(key string, expires time.Time, placeMicros int64) []Flag {
	return append(keyFlags(key), expiryFlags(expires, placeMicros)...)
}

func keyFlags(key string) []Flag {
	if validate.Key(key) != nil {
		return []Flag{KeyRefused}
	}
	return nil
}

func expiryFlags(expires time.Time, micros int64) []Flag {
	switch {
	case expires.Equal(Infinity):
		return []Flag{ExpiresInfinity}
	case expires.Equal(MinusInfinity):
		return []Flag{ExpiresMinusInfinity}
	case micros > validate.MaxTTL.Microseconds():
		return []Flag{ExpiresFar}
	}
	return nil
}

// Text is s as a terminal may show it: s itself when it is valid UTF-8 of
// printable characters, else Go-quoted, with escapes for the control
// characters, escape sequences, bidirectional marks and invalid bytes a
// terminal would act on or hide; escaped reports the latter. An empty s, and
// one that starts with a double quote, are quoted too, so that a quoted text
// is never mistaken for a key that reads the same.
func Text(s string) (shown string, escaped bool) {
	if s != "" && s[0] != '"' && utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return !strconv.IsPrint(r) }) < 0 {
		return s, false
	}
	return strconv.Quote(s), true
}
