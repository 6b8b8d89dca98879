package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/migrations"
	"github.com/pgfence/pgfence/pglease"
)

func TestListShow(t *testing.T) {
	t.Parallel()
	held := randomName("list-held:")
	l := holdKey(t, held)
	gone := randomName("list-gone:")
	c, err := pglease.New(pgtest.Pool(t), pglease.WithOwner("gone-owner"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g, err := c.TryAcquire(context.Background(), gone, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	g.Release(context.Background())
	lapsed := lapsedLease(t)

	db := pgtest.URL()
	t.Run("list tells held, released and expired leases apart", func(t *testing.T) {
		r := pgfence(t, nil, "list", "--database-url", db)
		wantCode(t, r, 0)
		for key, want := range map[string]string{held: "test-holder  ", gone: "released ", lapsed: "expired "} {
			line := lineWith(r.stdout, key)
			if !strings.Contains(line, want) {
				t.Fatalf("list: the line of %s is %q, want it to say %q:\n%s", key, line, want, r)
			}
		}
		if line := lineWith(r.stdout, held); !strings.Contains(line, "held,") {
			t.Fatalf("list: the held lease's line is %q", line)
		}
	})

	t.Run("show a released and an expired lease", func(t *testing.T) {
		for key, want := range map[string]string{gone: "released ", lapsed: "expired "} {
			r := pgfence(t, nil, "show", key, "--database-url", db)
			wantCode(t, r, 0)
			if line := lineWith(r.stdout, "state"); !strings.Contains(line, want) {
				t.Fatalf("show %s: state %q, want %q:\n%s", key, line, want, r)
			}
			if got := strings.Contains(r.stdout, "released at"); got != (key == gone) {
				t.Fatalf("show %s: a 'released at' line %v:\n%s", key, got, r)
			}
		}
	})

	t.Run("list --json --held", func(t *testing.T) {
		r := pgfence(t, nil, "list", "--json", "--held", "--database-url", db)
		wantCode(t, r, 0)
		var leases []leaseJSON
		if err := json.Unmarshal([]byte(r.stdout), &leases); err != nil {
			t.Fatalf("list --json: %v\n%s", err, r)
		}
		found := false
		for _, x := range leases {
			if !x.Held {
				t.Fatalf("--held listed an expired lease: %+v", x)
			}
			if x.Key == held {
				found = true
				if x.Fence != l.Fence() || x.Owner != "test-holder" || x.RemainingSeconds <= 20 || x.RemainingSeconds > 30 {
					t.Fatalf("list --json: %+v (fence want %d)", x, l.Fence())
				}
			}
		}
		if !found {
			t.Fatalf("list --json --held lacks %s:\n%s", held, r.stdout)
		}
	})

	t.Run("show a held lease", func(t *testing.T) {
		r := pgfence(t, nil, "show", held, "--database-url", db)
		wantCode(t, r, 0)
		for _, want := range []string{"test-holder", "held,", "left", "database clock"} {
			if !strings.Contains(r.stdout, want) {
				t.Fatalf("show lacks %q: %s", want, r)
			}
		}
	})

	t.Run("show --json of a released lease", func(t *testing.T) {
		r := pgfence(t, nil, "show", "--json", "--database-url", db, gone)
		wantCode(t, r, 0)
		var one leaseJSON
		if err := json.Unmarshal([]byte(r.stdout), &one); err != nil || one.Held || !one.Released || one.ReleasedAt == nil || one.Owner != "gone-owner" || one.RemainingSeconds != 0 {
			t.Fatalf("show --json of a released lease: %+v %v\n%s", one, err, r)
		}
	})

	t.Run("errors", func(t *testing.T) {
		wantCode(t, pgfence(t, nil, "show", "--database-url", db, randomName("never:")), exitFailed)
		wantCode(t, pgfence(t, nil, "show", "--database-url", db), exitUsage)
		r := pgfence(t, nil, "list", "--database-url", emptyDatabase(t))
		wantCode(t, r, exitDBError)
		if !strings.Contains(r.stderr, "run `pgfence migrate up`") {
			t.Fatalf("no hint to migrate: %s", r)
		}
	})
}

// lapsedLease takes a lease of 20 ms that nobody renews or releases (through
// the SQL functions, as a client that then crashed would: pglease itself
// releases a lease whose local deadline passed), after one grant of the key
// that was released, and returns its key once the database's clock has
// passed its expiry.
func lapsedLease(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := randomName("list-lapsed:")
	pool := pgtest.Pool(t)
	// Taken and released once first: the second grant must clear the
	// first one's release.
	var fence int64
	var released bool
	if err := pool.QueryRow(ctx, `SELECT fence FROM pgfence_acquire($1, interval '1 minute', 'lapsed-owner')`, key).Scan(&fence); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT released FROM pgfence_release($1, $2)`, key, fence).Scan(&released); err != nil || !released {
		t.Fatalf("pgfence_release: %v %v", released, err)
	}
	if _, err := pool.Exec(ctx, `SELECT pgfence_acquire($1, interval '20 milliseconds', 'lapsed-owner')`, key); err != nil {
		t.Fatal(err)
	}
	for {
		var expired bool
		if err := pool.QueryRow(ctx, `SELECT expires_at <= now() FROM lock_leases WHERE lock_key = $1`, key).Scan(&expired); err != nil {
			t.Fatal(err)
		}
		if expired {
			return key
		}
		select {
		case <-ctx.Done():
			t.Fatalf("lease %s never expired: %v", key, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// lineWith is the first line of out that contains s, "" if none does.
func lineWith(out, s string) string {
	for line := range strings.Lines(out) {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}

func TestNoLeasesSaysWhatItFound(t *testing.T) {
	for _, tc := range []struct {
		held bool
		rows int
		want string
	}{
		{false, 0, "the table has no rows"},
		{true, 0, "the table has no rows"},
		{true, 1, "1 expired or released row;"},
		{true, 3, "3 expired or released rows;"},
	} {
		if got := noLeases(tc.held, tc.rows); !strings.Contains(got, tc.want) {
			t.Errorf("noLeases(%v, %d) = %q, want %q in it", tc.held, tc.rows, got, tc.want)
		}
	}
}

func TestPlan(t *testing.T) {
	t.Parallel()
	r := pgfence(t, nil, "plan", "--ttl", "30s", "--renew", "10s", "--freeze", "45s")
	wantCode(t, r, 0)
	for _, want := range []string{
		"worst-case freeze absorbed       20s",
		"renewals that may fail in a row  1",
		"25s worst case, 15s best case",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("plan lacks %q: %s", want, r)
		}
	}
	if strings.Contains(r.stdout, "WARNING") {
		t.Fatalf("unexpected warning: %s", r)
	}
	r = pgfence(t, nil, "plan", "--ttl", "30s", "--renew", "20s")
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "WARNING") || !strings.Contains(r.stdout, "no failed renewal") {
		t.Fatalf("no warning for a renew interval close to the TTL: %s", r)
	}
	r = pgfence(t, nil, "plan", "--ttl", "30s", "--renew", "28s")
	if !strings.Contains(r.stdout, "local deadline passes before its first renewal") {
		t.Fatalf("no warning for renew past the local deadline: %s", r)
	}
	r = pgfence(t, nil, "plan", "--ttl", "30s", "--freeze", "5s") // default renew: TTL/3
	if !strings.Contains(r.stdout, "absorbed") || !strings.Contains(r.stdout, "renew interval                   10s") {
		t.Fatalf("plan with the default renew interval: %s", r)
	}
	wantCode(t, pgfence(t, nil, "plan", "--ttl", "30s", "--renew", "30s"), exitUsage)
	wantCode(t, pgfence(t, nil, "plan", "--renew", "10s"), exitUsage)
	wantCode(t, pgfence(t, nil, "plan", "--ttl", "thirty"), exitUsage)
}

func TestPlanFigures(t *testing.T) {
	for _, tc := range []struct {
		ttl, renew, freeze time.Duration
		absorbed           time.Duration
		tolerated          int
		staleWorst         time.Duration
	}{
		{30 * time.Second, 10 * time.Second, 45 * time.Second, 20 * time.Second, 1, 25 * time.Second},
		{30 * time.Second, 15 * time.Second, 0, 15 * time.Second, 0, 0},
		{30 * time.Second, 5 * time.Second, 20 * time.Second, 25 * time.Second, 4, 0},
		{30 * time.Second, 29 * time.Second, time.Second, time.Second, 0, 0},
		// Renewals due at or after the local deadline (TTL - TTL/10) do not
		// count: the holder has stopped itself by then.
		{10 * time.Second, 3 * time.Second, 8 * time.Second, 7 * time.Second, 1, time.Second},
		{30 * time.Second, 14 * time.Second, 0, 16 * time.Second, 0, 0},
		{30 * time.Second, 9500 * time.Millisecond, 0, 20500 * time.Millisecond, 1, 0},
	} {
		p := plan(tc.ttl, tc.renew, tc.ttl/10, tc.freeze)
		if p.Absorbed != tc.absorbed || p.FailuresTolerated != tc.tolerated || p.StaleWorst != tc.staleWorst {
			t.Errorf("plan(%v, %v, freeze %v) = absorbed %v, tolerated %d, stale %v; want %v, %d, %v",
				tc.ttl, tc.renew, tc.freeze, p.Absorbed, p.FailuresTolerated, p.StaleWorst, tc.absorbed, tc.tolerated, tc.staleWorst)
		}
	}
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	db := emptyDatabase(t)
	latest, err := migrations.Latest()
	if err != nil {
		t.Fatal(err)
	}
	r := pgfence(t, nil, "migrate", "version", "--database-url", db)
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "version 0") || !strings.Contains(r.stdout, "migrate up") {
		t.Fatalf("version of an empty database: %s", r)
	}
	if hasVersionTable(t, db) {
		t.Fatal("migrate version created the version table")
	}
	r = pgfence(t, nil, "migrate", "up", "--database-url", db)
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "applied 000008_baseline, 000009_coordination, 000010_released_at, 000011_fair_kinds, 000012_wake_one, 000013_one_key, 000014_client_role (version 0 -> "+itoa(latest)+")") {
		t.Fatalf("up on an empty database: %s", r)
	}
	r = pgfence(t, []string{"DATABASE_URL=" + db}, "migrate", "version")
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "version "+itoa(latest)+" ") {
		t.Fatalf("after up: %s", r)
	}
	r = pgfence(t, nil, "migrate", "up", "--database-url", db) // idempotent
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "already at version "+itoa(latest)+", nothing applied") {
		t.Fatalf("second up: %s", r)
	}
	wantCode(t, pgfence(t, nil, "exec", "--database-url", db, "--key", "k", "--", "true"), 0)
	r = pgfence(t, nil, "migrate", "down", "--database-url", db)
	wantCode(t, r, exitUsage)
	if !strings.Contains(r.stderr, "--yes") {
		t.Fatalf("down without --yes: %s", r)
	}
	wantCode(t, pgfence(t, nil, "migrate", "down", "--yes", "--database-url", db), 0)
	r = pgfence(t, nil, "migrate", "version", "--database-url", db)
	if !strings.Contains(r.stdout, "version 0") {
		t.Fatalf("after down: %s", r)
	}
	wantCode(t, pgfence(t, nil, "migrate", "sideways", "--database-url", db), exitUsage)
	wantCode(t, pgfence(t, nil, "migrate", "--database-url", db), exitUsage)
}

func itoa(v uint) string { return strconv.FormatUint(uint64(v), 10) }
