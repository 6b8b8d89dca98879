package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/migrations"
)

// upTo applies the up files up to version last, as psql would, and records
// that version, so that Up goes on from there.
func upTo(t *testing.T, url string, last int) {
	t.Helper()
	ctx := context.Background()
	pool := poolOn(t, url)
	names, err := fs.Glob(migrations.FS(), "*.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	for _, n := range names {
		var v int
		if _, err := fmt.Sscanf(n, "%d_", &v); err != nil || v > last {
			continue
		}
		b, err := fs.ReadFile(migrations.FS(), n)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, string(b)); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
	}
	if err := migrations.Force(ctx, pool, last); err != nil {
		t.Fatal(err)
	}
}

// A database of the v0.1.0 schema (version 12) with a holder of every
// kind migrates to one table of holders with every holder kept: its fence,
// owner token and expiry on the record, renewable and releasable by its
// fence afterwards, and the next grant's fence above every earlier one. Down
// gives the v0.1.0 schema back, holders included.
func TestUpgradeKeepsEveryHolder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := pgtest.BareDatabase(t)
	upTo(t, url, 12)
	pool := poolOn(t, url)

	type held struct {
		key, kind string
		fence     int64
	}
	var hs []held
	take := func(kind, sql string) {
		t.Helper()
		var f int64
		if err := pool.QueryRow(ctx, sql).Scan(&f); err != nil {
			t.Fatalf("v0.1.0 %s: %v", kind, err)
		}
		hs = append(hs, held{strings.Split(strings.Split(sql, "'")[1], "'")[0], kind, f})
	}
	take("plain", `SELECT fence FROM pgfence_acquire('plain', '1 hour', 'old')`)
	take("permit", `SELECT fence FROM pgfence_acquire_permit('sem', 3, '1 hour', 'old')`)
	take("permit", `SELECT fence FROM pgfence_acquire_permit('sem', 3, '1 hour', 'old')`)
	take("shared", `SELECT fence FROM pgfence_acquire_shared('rw', false, '1 hour', 'old')`)
	take("shared", `SELECT fence FROM pgfence_acquire_shared('rw', false, '1 hour', 'old')`)
	take("exclusive", `SELECT fence FROM pgfence_acquire_shared('x', true, '1 hour', 'old')`)
	var before int64
	if err := pool.QueryRow(ctx, `SELECT max(fence) FROM (SELECT fence FROM lock_leases UNION ALL SELECT fence FROM pgfence_permits) AS f`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	type rec struct {
		token   string
		expires time.Time
	}
	old := map[int64]rec{}
	rows, err := pool.Query(ctx, `SELECT fence, owner_token, expires_at FROM lock_leases
		UNION ALL SELECT fence, owner_token, expires_at FROM pgfence_permits`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var f int64
		var r rec
		if err := rows.Scan(&f, &r.token, &r.expires); err != nil {
			t.Fatal(err)
		}
		old[f] = r
	}
	if rows.Err() != nil || len(old) != len(hs) {
		t.Fatalf("v0.1.0 rows: %d, want %d (%v)", len(old), len(hs), rows.Err())
	}

	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}

	pgtest.Step(t, "every holder is on the record with its fence, token and expiry", func(t *testing.T) {
		for _, h := range hs {
			var token string
			var expires time.Time
			var slot int
			var kind string
			err := pool.QueryRow(ctx, `SELECT owner_token, expires_at, slot, kind FROM lock_leases
				WHERE lock_key = $1 AND fence = $2 AND expires_at > now() AND owner_token <> ''`, h.key, h.fence).Scan(&token, &expires, &slot, &kind)
			if err != nil {
				t.Fatalf("%s holder of %q (fence %d) after the upgrade: %v", h.kind, h.key, h.fence, err)
			}
			if o := old[h.fence]; token != o.token || !expires.Equal(o.expires) {
				t.Fatalf("%q fence %d: token/expiry changed by the upgrade", h.key, h.fence)
			}
			want := map[string]string{"plain": "exclusive", "exclusive": "exclusive", "permit": "permit", "shared": "shared"}[h.kind]
			if kind != want || (kind == "exclusive") != (slot == 0) {
				t.Fatalf("%q fence %d: kind %s slot %d, want %s", h.key, h.fence, kind, slot, want)
			}
		}
	})
	pgtest.Step(t, "held keys exclude every kind that conflicts", func(t *testing.T) {
		for _, q := range []string{
			`SELECT fence FROM pgfence_acquire('sem', '1 min', 'new')`,
			`SELECT fence FROM pgfence_acquire('rw', '1 min', 'new')`,
			`SELECT fence FROM pgfence_acquire_shared('plain', false, '1 min', 'new')`,
			`SELECT fence FROM pgfence_acquire_shared('x', false, '1 min', 'new')`,
			`SELECT fence FROM pgfence_acquire_permit('plain', 3, '1 min', 'new')`,
		} {
			var f int64
			if err := pool.QueryRow(ctx, q).Scan(&f); err == nil {
				t.Fatalf("%s granted fence %d beside a holder kept by the upgrade", q, f)
			}
		}
		var pe *pgconn.PgError
		_, err := pool.Exec(ctx, `SELECT * FROM pgfence_acquire_permit('rw', 3, '1 min', 'new')`)
		if !errors.As(err, &pe) || pe.Code != "PF007" {
			t.Fatalf("a permit of a key held shared: %v, want PF007", err)
		}
	})
	pgtest.Step(t, "a holder renews and releases by its fence; the next fence is above all", func(t *testing.T) {
		for _, h := range hs {
			var e time.Time
			if err := pool.QueryRow(ctx, `SELECT expires_at FROM pgfence_renew($1, $2, '2 hours')`, h.key, h.fence).Scan(&e); err != nil {
				t.Fatalf("renew %q fence %d after the upgrade: %v", h.key, h.fence, err)
			}
		}
		var f int64
		if err := pool.QueryRow(ctx, `SELECT fence FROM pgfence_acquire_permit('sem', 3, '1 min', 'new')`).Scan(&f); err != nil || f <= before {
			t.Fatalf("the third permit after the upgrade: fence %d (before: %d), %v", f, before, err)
		}
		hs = append(hs, held{"sem", "permit", f})
	})
	pgtest.Step(t, "down restores the v0.1.0 schema with the holders", func(t *testing.T) {
		if err := migrations.Force(ctx, pool, 13); err != nil {
			t.Fatal(err)
		}
		b, err := fs.ReadFile(migrations.FS(), "000013_one_key.down.sql")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, string(b)); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM lock_leases WHERE expires_at > now())
			+ (SELECT count(*) FROM pgfence_permits WHERE expires_at > now())`).Scan(&n); err != nil || n != len(hs) {
			t.Fatalf("holders after down: %d, want %d (%v)", n, len(hs), err)
		}
		for _, h := range hs {
			if h.kind == "plain" || h.kind == "exclusive" {
				continue
			}
			var released bool
			if err := pool.QueryRow(ctx, `SELECT released FROM pgfence_release_permit($1, (SELECT slot FROM pgfence_permits WHERE fence = $2), $2)`, h.key, h.fence).Scan(&released); err != nil || !released {
				t.Fatalf("v0.1.0 release of %q fence %d after down: %v %v", h.key, h.fence, released, err)
			}
		}
	})
}

// The migration refuses a database where one key is held both as a plain
// lease and as a semaphore: they are one lock now, and two holders of it.
func TestUpgradeRefusesAKeyHeldTwoWays(t *testing.T) {
	ctx := context.Background()
	url := pgtest.BareDatabase(t)
	upTo(t, url, 12)
	pool := poolOn(t, url)
	if _, err := pool.Exec(ctx, `SELECT pgfence_acquire('both', '1 hour', 'a'); SELECT pgfence_acquire_permit('both', 2, '1 hour', 'b')`); err != nil {
		t.Fatal(err)
	}
	err := migrations.Up(ctx, pool)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "55000" || !strings.Contains(pe.Message, "'both'") {
		t.Fatalf("Up with a key held two ways: %v, want SQLSTATE 55000 naming the key", err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pgfence_permits WHERE expires_at > now()`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("after the refused upgrade the v0.1.0 schema holds %d permits (%v), want it untouched", n, err)
	}
}
