package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/pgfence/pgfence/cmd/pgfence/internal/oddrow"
	"github.com/pgfence/pgfence/cmd/pgfence/internal/watch"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// The odd rows' keys: written straight into the tables, as a role that may
// write them (or another tool) can, and no pgfence client does.
const (
	oddInfinity = "odd/infinity"
	oddMinusInf = "odd/minus-infinity"
	oddHuge     = "odd/huge-fence"
	oddFar      = "odd/far-future"
	oddBackward = "odd/backwards"
	oddCtl      = "odd/ctl\n\tnext\x1b[31mred\x1b[0m\u200frtl"
	oddCtlOwner = "own\x1b[2J"
	oddSem      = "odd/semaphore"
	oddWaited   = "odd/waited"
	hugeFence   = math.MaxInt64 - 1
)

var oddLong = "odd/" + strings.Repeat("k", 508) // 512 bytes, the longest key

// oddDatabase is a database of its own with a row of each odd kind: a
// lease whose expiry is 'infinity', one whose expiry is '-infinity', a
// fence near 2^63, an expiry in the year 200000, an acquisition after the
// expiry (and in the future), a 512-byte key, a key and owner with control
// characters, escape sequences and a bidirectional mark, an empty key
// (which pglease refuses, another tool may write); a semaphore
// permit whose expiry is 'infinity', and a fair waiter whose place never
// expires.
func oddDatabase(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	db, pool := serveDatabase(t)
	const insert = `INSERT INTO lock_leases (lock_key, owner, owner_token, fence, acquired_at, expires_at)
VALUES ($1, $2, $1, $3, now() + $4::interval, $5::timestamptz)`
	for _, r := range []struct {
		key, owner string
		fence      int64
		acquired   string // after now
		expires    string
	}{
		{oddInfinity, "other-tool", 101, "-1 minute", "infinity"},
		{oddMinusInf, "other-tool", 102, "-1 minute", "-infinity"},
		{oddHuge, "other-tool", hugeFence, "-1 minute", "now() + interval '1 hour'"},
		{oddFar, "other-tool", 103, "-1 minute", "200000-01-01 00:00:00+00"},
		{oddBackward, "other-tool", 104, "1 hour", "now() + interval '10 minutes'"},
		{oddLong, "other-tool", 105, "-1 minute", "now() + interval '1 hour'"},
		{oddCtl, oddCtlOwner, 106, "-1 minute", "now() + interval '1 hour'"},
		{"", "other-tool", 107, "-1 minute", "now() - interval '1 second'"},
	} {
		stmt, args := insert, []any{r.key, r.owner, r.fence, r.acquired, r.expires}
		if strings.HasPrefix(r.expires, "now()") {
			stmt = strings.Replace(insert, "$5::timestamptz", r.expires, 1)
			args = args[:4]
		}
		if _, err := pool.Exec(ctx, stmt, args...); err != nil {
			t.Fatalf("insert %q: %v", r.key, err)
		}
	}
	for _, stmt := range []string{
		// A permit as pgfence grants it (a client would release it when
		// closed), then made endless.
		"SELECT pgfence_acquire_permit('" + oddSem + "', 2, '1 min', 'sem-holder')",
		"UPDATE lock_leases SET expires_at = 'infinity' WHERE lock_key = '" + oddSem + "' AND slot > 0",
		"INSERT INTO pgfence_waiters (lock_key, owner, owner_token, ticket, expires_at) VALUES ('" + oddWaited + "', 'waiter', 'odd-token', 1, 'infinity')",
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	return db, pool
}

// rawControl returns the first character of out a terminal would act on
// or hide (anything not printable but the newline), or "" when none.
func rawControl(out string) string {
	for _, r := range out {
		if r != '\n' && !strconv.IsPrint(r) {
			return fmt.Sprintf("%q", r)
		}
	}
	return ""
}

// TestOddRows: list, show and serve (the JSON and the metrics) answer in
// full and exit 0 on rows pgfence's clients never write, show each with
// its flags, and never put a raw control character on the terminal; nor
// does exec when it names the holder of such a key.
func TestOddRows(t *testing.T) {
	t.Parallel()
	db, _ := oddDatabase(t)
	shownCtl := strconv.Quote(oddCtl)

	pgtest.Step(t, "list shows every row with its flags, and the legend once", func(t *testing.T) {
		r := pgfence(t, nil, "list", "--database-url", db)
		wantCode(t, r, 0)
		if c := rawControl(r.stdout); c != "" {
			t.Errorf("list wrote the raw character %s:\n%s", c, r.stdout)
		}
		for key, want := range map[string][]string{
			oddInfinity:             {"held, never expires (expiry infinity)", "expires-infinity"},
			oddMinusInf:             {"expired, never held (expiry -infinity)", "expires-minus-infinity"},
			oddHuge:                 {strconv.FormatInt(hugeFence, 10), "held, ", "fence-huge"},
			oddFar:                  {"about 19", "years left", "expires-far"},
			oddBackward:             {"acquired-in-future", "acquired-after-expiry"},
			oddLong:                 {"held, "},
			shownCtl:                {strconv.Quote(oddCtlOwner), "held, ", "escaped"},
			oddSem:                  {"permit of 2", "never expires", "expires-infinity"},
			oddWaited + "  waiter ": {"never (infinity)", "expires-infinity"},
			`"" `:                   {"other-tool", "107", "expired ", "key-refused,escaped"},
		} {
			line := lineWith(r.stdout, key)
			for _, w := range want {
				if !strings.Contains(line, w) {
					t.Errorf("list: the line of %q is %q, want it to say %q", key, line, w)
				}
			}
		}
		if n := strings.Count(r.stdout, "\nFLAGS: "); n != 1 {
			t.Errorf("the flags are explained %d times, want once:\n%s", n, r.stdout)
		}
		for _, f := range []oddrow.Flag{oddrow.ExpiresInfinity, oddrow.ExpiresMinusInfinity, oddrow.FenceHuge, oddrow.Escaped} {
			if !strings.Contains(r.stdout, "  "+string(f)+"  ") || !strings.Contains(r.stdout, f.Note()) {
				t.Errorf("the legend does not explain %s:\n%s", f, r.stdout)
			}
		}
	})

	pgtest.Step(t, "list --json carries every row, its flags and the infinite expiry", func(t *testing.T) {
		r := pgfence(t, nil, "list", "--json", "--database-url", db)
		wantCode(t, r, 0)
		var entries []leaseJSON
		if err := json.Unmarshal([]byte(r.stdout), &entries); err != nil {
			t.Fatalf("list --json: %v\n%s", err, r)
		}
		byKey := map[string]leaseJSON{}
		for _, e := range entries {
			byKey[e.Key+"/"+e.Kind] = e
		}
		for key, want := range map[string]oddrow.Flag{
			oddInfinity + "/lease": oddrow.ExpiresInfinity, oddMinusInf + "/lease": oddrow.ExpiresMinusInfinity,
			oddHuge + "/lease": oddrow.FenceHuge, oddFar + "/lease": oddrow.ExpiresFar,
			oddBackward + "/lease": oddrow.AcquiredAfterExpiry, oddSem + "/permit": oddrow.ExpiresInfinity,
			oddWaited + "/exclusive": oddrow.ExpiresInfinity,
		} {
			if e, ok := byKey[key]; !ok || !slices.Contains(e.Flags, want) {
				t.Errorf("list --json: %s is %+v, want the flag %s", key, e, want)
			}
		}
		if e := byKey[oddInfinity+"/lease"]; !e.Held || !e.ExpiresAt.Equal(oddrow.Infinity) || e.RemainingSeconds != float64(oddrow.MaxMicros)/1e6 {
			t.Errorf("the infinite lease: %+v", e)
		}
		if !strings.Contains(r.stdout, `"expires_at": "infinity"`) || !strings.Contains(r.stdout, `"expires_at": "-infinity"`) ||
			!strings.Contains(r.stdout, `"expires_at": "200000-01-01T00:00:00Z"`) {
			t.Errorf("list --json does not spell the odd expiries:\n%s", r.stdout)
		}
		if e, ok := byKey[oddCtl+"/lease"]; !ok || e.Owner != oddCtlOwner || len(e.Flags) != 0 {
			t.Errorf("the control-character key, as it is in the JSON: %+v (found %v)", e, ok)
		}
		if e, ok := byKey[oddLong+"/lease"]; !ok || e.Fence != 105 {
			t.Errorf("the 512-byte key: %+v (found %v)", e, ok)
		}
		if e := byKey[oddHuge+"/lease"]; e.Fence != hugeFence {
			t.Errorf("the huge fence reads %d", e.Fence)
		}
	})

	pgtest.Step(t, "show answers for every odd key", func(t *testing.T) {
		for key, want := range map[string][]string{
			oddInfinity: {"expires at    infinity", "flags         expires-infinity"},
			oddMinusInf: {"expires at    -infinity", "flags         expires-minus-infinity"},
			oddHuge:     {"fence         " + strconv.FormatInt(hugeFence, 10), "fence-huge"},
			oddFar:      {"expires at    200000-01-01T00:00:00Z", "expires-far"},
			oddBackward: {"acquired-in-future,acquired-after-expiry"},
			oddLong:     {"key           " + oddLong},
			oddCtl:      {"key           " + shownCtl, "owner         " + strconv.Quote(oddCtlOwner), "flags         escaped"},
			oddSem:      {"permit of 2", "never expires", "expires-infinity"},
			"":          {`key           ""`, "flags         key-refused,escaped"},
		} {
			r := pgfence(t, nil, "show", "--database-url", db, key)
			wantCode(t, r, 0)
			if c := rawControl(r.stdout); c != "" {
				t.Errorf("show %q wrote the raw character %s:\n%s", key, c, r.stdout)
			}
			for _, w := range want {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("show %q does not say %q:\n%s", key, w, r.stdout)
				}
			}
			if key != oddSem && strings.Contains(r.stdout, oddSem) {
				t.Errorf("show %q shows another key's permit:\n%s", key, r.stdout)
			}
		}
		r := pgfence(t, nil, "show", "--json", "--database-url", db, oddInfinity)
		wantCode(t, r, 0)
		var one leaseJSON
		if err := json.Unmarshal([]byte(r.stdout), &one); err != nil || !one.ExpiresAt.Equal(oddrow.Infinity) || !slices.Contains(one.Flags, oddrow.ExpiresInfinity) {
			t.Errorf("show --json: %+v, %v\n%s", one, err, r.stdout)
		}
	})

	pgtest.Step(t, "exec names the holder of an odd row safely", func(t *testing.T) {
		for key, want := range map[string]string{
			oddInfinity: "held by other-tool (fence 101, it never expires: its expiry is infinity)",
			oddCtl:      "held by " + strconv.Quote(oddCtlOwner) + " (fence 106, ",
			oddFar:      "years left by the database clock",
		} {
			r := pgfence(t, nil, "exec", "--database-url", db, "--key", key, "--", "true")
			wantCode(t, r, exitHeld)
			if c := rawControl(r.stderr); c != "" || !strings.Contains(r.stderr, want) {
				t.Errorf("exec --key %q: want %q and no raw character (found %s):\n%s", key, want, c, r.stderr)
			}
		}
	})

	s := startServe(t, db)
	pgtest.Step(t, "the serve JSON carries every held row with its flags", func(t *testing.T) {
		var st watch.State
		eventually(t, "/api/state reads the odd rows", func() string {
			_, js := s.get(t, "/api/state")
			st = watch.State{}
			if err := json.Unmarshal([]byte(js), &st); err != nil {
				return err.Error() + "\n" + js
			}
			if !st.OK || st.Data == nil || len(st.Data.Leases.List) != 6 {
				return js
			}
			return ""
		})
		leases := map[string]watch.Lease{}
		for _, l := range st.Data.Leases.List {
			leases[l.Key] = l
		}
		if l := leases[oddInfinity]; !slices.Contains(l.Flags, oddrow.ExpiresInfinity) || !l.ExpiresAt.Equal(oddrow.Infinity) {
			t.Errorf("the infinite lease: %+v", l)
		}
		if l := leases[oddHuge]; l.FenceText != strconv.FormatInt(hugeFence, 10) || !slices.Contains(l.Flags, oddrow.FenceHuge) {
			t.Errorf("the huge fence: %+v", l)
		}
		if l, ok := leases[oddCtl]; !ok || l.Owner != oddCtlOwner {
			t.Errorf("the control-character key: %+v (found %v)", l, ok)
		}
		if _, ok := leases[oddLong]; !ok {
			t.Error("the 512-byte key is missing")
		}
		if len(st.Data.Permits) != 1 || len(st.Data.Permits[0].Holders) != 1 || !slices.Contains(st.Data.Permits[0].Holders[0].Flags, oddrow.ExpiresFar) {
			t.Errorf("the permit: %+v", st.Data.Permits)
		}
		if len(st.Data.Waiters) != 1 || !slices.Contains(st.Data.Waiters[0].Flags, oddrow.ExpiresFar) {
			t.Errorf("the waiter: %+v", st.Data.Waiters)
		}
		if st.Data.FlagNotes[oddrow.ExpiresInfinity] != oddrow.ExpiresInfinity.Note() {
			t.Errorf("flag notes: %v", st.Data.FlagNotes)
		}
	})

	pgtest.Step(t, "the metrics parse, with +Inf left for an infinite expiry", func(t *testing.T) {
		_, body := s.get(t, "/metrics")
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(strings.NewReader(body))
		if err != nil {
			t.Fatalf("Prometheus' parser refuses /metrics: %v\n%s", err, body)
		}
		left := map[string]float64{}
		for _, m := range fams["pgfence_lease_remaining_seconds"].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "key" {
					left[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
		if !math.IsInf(left[oddInfinity], 1) {
			t.Errorf("time left of the infinite lease: %v, want +Inf\n%s", left[oddInfinity], body)
		}
		if v := left[oddCtl]; v <= 0 || v > 3600 {
			t.Errorf("time left of the control-character key: %v\n%s", v, body)
		}
		if v, ok := metricValue(body, "pgfence_leases_held"); !ok || v != 6 {
			t.Errorf("pgfence_leases_held = %v\n%s", v, body)
		}
	})
}

// TestListWritesNothingOnAFailedRead: when a read after the first fails
// (here the waiters, which the role may not read), list and show print no
// part of a table: the error alone.
func TestListWritesNothingOnAFailedRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, pool := oddDatabase(t)
	role := randomName("pgfence_leases_only_")
	q := pgx.Identifier{role}.Sanitize()
	const password = "pw-L1st-3e8a"
	for _, stmt := range []string{
		"CREATE ROLE " + q + " LOGIN PASSWORD '" + password + "'",
		"GRANT USAGE ON SCHEMA public TO " + q,
		"GRANT SELECT ON lock_leases TO " + q,
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		pool.Exec(ctx, "DROP OWNED BY "+q)
		pool.Exec(ctx, "DROP ROLE "+q)
	})
	limited := withUser(t, db, role, password)
	for _, args := range [][]string{{"list"}, {"list", "--json"}, {"show", oddInfinity}} {
		r := pgfence(t, nil, append(args, "--database-url", limited)...)
		if r.code == 0 || r.stdout != "" || !strings.Contains(r.stderr, "permission denied") {
			t.Errorf("pgfence %v with the waiters unreadable: want an error and nothing on stdout, got %s", args, r)
		}
		if strings.Contains(r.stdout+r.stderr, password) {
			t.Errorf("pgfence %v printed the password", args)
		}
	}
}

// TestServePageOddRows: the live page shows the odd rows, flagged, with
// the flags explained once, the infinite expiry as "never", and a key with
// control characters escaped as list shows it.
func TestServePageOddRows(t *testing.T) {
	t.Parallel()
	chromium := browserPath(t)
	db, _ := oddDatabase(t)
	s := startServe(t, db)
	_, browser := openPage(t, chromium, s.base+"/")
	row := func(key string) string {
		got, err := chromedp.Run(browser, chromedp.Evaluate[string](fmt.Sprintf(`(() => {
  const r = [...document.querySelectorAll("#leases tr")].find((tr) => tr.dataset.key === %q);
  return r ? [...r.children].map((td) => td.textContent).join("|") : "";
})()`, key)))
		if err != nil {
			return err.Error()
		}
		return got
	}
	for key, want := range map[string]string{
		oddInfinity: oddInfinity + "|other-tool|101|never (infinity)|expires-infinity",
		oddHuge:     oddHuge + "|other-tool|" + strconv.FormatInt(hugeFence, 10) + "|",
		oddCtl:      strconv.Quote(oddCtl) + "|" + strconv.Quote(oddCtlOwner) + "|106|",
		oddFar:      oddFar + "|other-tool|103|292 years or more|expires-far",
		oddLong:     oddLong + "|other-tool|105|",
	} {
		eventually(t, "the page shows "+key, func() string {
			if got := row(key); !strings.HasPrefix(got, want) {
				return fmt.Sprintf("row %q, want it to start %q", got, want)
			}
			return ""
		})
	}
	if got := row(oddHuge); !strings.HasSuffix(got, "|fence-huge") {
		t.Errorf("the huge fence's row %q has no flag", got)
	}
	notes, err := chromedp.Run(browser, chromedp.Evaluate[string](`(() => {
  const n = document.getElementById("flag-notes");
  return n.hidden ? "" : document.getElementById("flag-list").textContent;
})()`))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []oddrow.Flag{oddrow.ExpiresInfinity, oddrow.ExpiresFar, oddrow.FenceHuge} {
		if strings.Count(notes, f.Note()) != 1 {
			t.Errorf("the page explains %s %d times: %q", f, strings.Count(notes, f.Note()), notes)
		}
	}
	holders, err := chromedp.Run(browser, chromedp.Evaluate[string](`document.querySelector("#permits .holders").textContent`))
	if err != nil || !strings.Contains(holders, "[expires-far]") {
		t.Errorf("the permit's holders: %q, %v", holders, err)
	}
}
