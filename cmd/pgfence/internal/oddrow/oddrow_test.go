package oddrow

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// Infinity and MinusInfinity are the instants the queries read 'infinity'
// and '-infinity' as: PostgreSQL's extreme timestamptz values, counted in
// microseconds from 2000-01-01 (its epoch) as it stores them.
func TestSentinels(t *testing.T) {
	epoch := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	const endMicros = 9223371331200000000 // 294277-01-01, PostgreSQL's END_TIMESTAMP
	got := time.Unix(epoch.Unix()+endMicros/1e6, 0).Add(-time.Microsecond)
	if !got.Equal(Infinity) {
		t.Errorf("Infinity = %v, want %v", Infinity, got)
	}
	const minMicros = -211813488000000000 // 4714-11-24 00:00 BC, PostgreSQL's MIN_TIMESTAMP
	if got := time.Unix(epoch.Unix()+minMicros/1e6, 0); !got.Equal(MinusInfinity) {
		t.Errorf("MinusInfinity = %v, want %v", MinusInfinity, got)
	}
	if Micros(1<<62) != time.Duration(MaxMicros)*time.Microsecond || Micros(-1<<62) != -time.Duration(MaxMicros)*time.Microsecond || Micros(1500) != 1500*time.Microsecond {
		t.Error("Micros does not saturate at MaxMicros")
	}
}

// Time writes what time.Time writes where it can, and "infinity",
// "-infinity" and years of five or more digits where time.Time's
// MarshalJSON fails; it reads back what it wrote.
func TestTimeJSON(t *testing.T) {
	now := time.Date(2025, 3, 4, 5, 6, 7, 891000, time.UTC)
	std, _ := json.Marshal(now)
	for _, c := range []struct {
		t    time.Time
		want string
	}{
		{now, string(std)},
		{Infinity, `"infinity"`},
		{MinusInfinity, `"-infinity"`},
		{time.Date(200000, 1, 1, 0, 0, 0, 0, time.UTC), `"200000-01-01T00:00:00Z"`},
		{time.Date(-12, 2, 29, 1, 0, 0, 0, time.UTC), `"-0012-02-29T01:00:00Z"`},
		{time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), `"0001-01-01T00:00:00Z"`},
	} {
		b, err := json.Marshal(Time{c.t})
		if err != nil || string(b) != c.want {
			t.Errorf("Marshal(%v) = %s, %v; want %s", c.t, b, err, c.want)
			continue
		}
		var back Time
		if err := json.Unmarshal(b, &back); err != nil || !back.Equal(c.t) {
			t.Errorf("Unmarshal(%s) = %v, %v; want %v", b, back, err, c.t)
		}
	}
	var bad Time
	for _, s := range []string{`""`, `"x-01-01T00:00:00Z"`, `"12345"`, `1`} {
		if err := json.Unmarshal([]byte(s), &bad); err == nil {
			t.Errorf("Unmarshal(%s) accepted: %v", s, bad)
		}
	}
}

func TestFlags(t *testing.T) {
	now := time.Date(2025, 3, 4, 5, 0, 0, 0, time.UTC)
	soon := now.Add(time.Minute)
	ok := Row{Key: "k", Fence: 1<<44 + 1, Acquired: now.Add(-time.Second), Expires: soon, RemainingMicros: 60e6, Now: now}
	for _, c := range []struct {
		name string
		row  func(r *Row)
		want []Flag
	}{
		{"as pgfence writes it", func(*Row) {}, nil},
		{"infinity", func(r *Row) { r.Expires, r.RemainingMicros = Infinity, MaxMicros }, []Flag{ExpiresInfinity}},
		{"-infinity", func(r *Row) { r.Expires, r.RemainingMicros = MinusInfinity, 0 }, []Flag{ExpiresMinusInfinity}},
		{"far", func(r *Row) { r.Expires, r.RemainingMicros = now.AddDate(1, 0, 0), 365*86400e6 }, []Flag{ExpiresFar}},
		{"saturated without the expiry", func(r *Row) { r.Acquired, r.Expires, r.RemainingMicros = time.Time{}, time.Time{}, MaxMicros }, []Flag{ExpiresFar}},
		{"backwards", func(r *Row) { r.Acquired = soon.Add(time.Second) }, []Flag{AcquiredInFuture, AcquiredAfterExpiry}},
		{"acquired -infinity", func(r *Row) { r.Acquired = MinusInfinity }, []Flag{AcquiredInfinite}},
		{"acquired infinity", func(r *Row) { r.Acquired = Infinity }, []Flag{AcquiredInfinite, AcquiredInFuture, AcquiredAfterExpiry}},
		{"huge fence", func(r *Row) { r.Fence = 1<<63 - 2 }, []Flag{FenceHuge}},
		{"fence 0", func(r *Row) { r.Fence = 0 }, []Flag{FenceNotPositive}},
		{"512-byte key", func(r *Row) { r.Key = strings.Repeat("k", 512) }, nil},
		{"513-byte key", func(r *Row) { r.Key = strings.Repeat("k", 513) }, []Flag{KeyRefused}},
		{"empty key", func(r *Row) { r.Key = "" }, []Flag{KeyRefused}},
		{"control characters are fine by pglease", func(r *Row) { r.Key = "a\nb\x1b[2J\u200f" }, nil},
	} {
		r := ok
		c.row(&r)
		if got := r.Flags(); !slices.Equal(got, c.want) {
			t.Errorf("%s: flags %v, want %v", c.name, got, c.want)
		}
	}
	if got := WaiterFlags("k", Infinity, MaxMicros); !slices.Equal(got, []Flag{ExpiresInfinity}) {
		t.Errorf("a waiter's infinite place: %v", got)
	}
	for _, f := range Flags {
		if f.Note() == "" {
			t.Errorf("flag %s has no note", f)
		}
	}
}

// Text leaves printable text alone and quotes, with escapes, whatever a
// terminal would act on or hide, and what could be mistaken for a quoted
// text.
func TestText(t *testing.T) {
	for in, want := range map[string]string{
		"invoice:inv_72":         "invoice:inv_72",
		"ünï code 鍵":             "ünï code 鍵",
		"a b":                    "a b",
		"":                       `""`,
		`"quoted"`:               `"\"quoted\""`,
		"line\nnext\ttab":        `"line\nnext\ttab"`,
		"\x1b[31mred\x1b[0m":     `"\x1b[31mred\x1b[0m"`,
		"rtl\u200fmark\u202eabc": `"rtl\u200fmark\u202eabc"`,
		"nbsp\u00a0":             `"nbsp\u00a0"`,
		"bad\xffbyte":            `"bad\xffbyte"`,
		"del\x7f":                `"del\x7f"`,
	} {
		got, escaped := Text(in)
		if got != want || escaped != (got != in) {
			t.Errorf("Text(%q) = %s, %v; want %s", in, got, escaped, want)
		}
	}
}
