package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/internal/pgdb"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/migrations"
	"github.com/pgfence/pgfence/pgguard"
	"github.com/pgfence/pgfence/pglease"
)

// A service role granted only pgfence_client (and its own schema) runs
// every kind of lease, waits, the SQL functions, pgguard's guarded writes
// and trigger on its own table and claim on the ready-made table and its
// own, in a schema that a role with no superuser power migrated; what it may
// not do is refused.
func TestClientRole(t *testing.T) {
	ctx := context.Background()
	r := pgtest.ClientRoles(t)
	pool := poolOn(t, r.AppURL)
	q := func(name string) string { return pgx.Identifier{r.Schema, name}.Sanitize() }

	newClient := func(t *testing.T, opts ...pglease.Option) *pglease.Client {
		t.Helper()
		c, err := pglease.New(pool, append([]pglease.Option{pglease.WithSchema(r.Schema), pglease.WithoutAutoRenew()}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	t.Run("every kind of lease", func(t *testing.T) {
		c := newClient(t)
		l, err := c.TryAcquire(ctx, "plain", time.Minute)
		if err != nil {
			t.Fatalf("plain: %v", err)
		}
		if err := l.Renew(ctx); err != nil {
			t.Fatalf("renew: %v", err)
		}
		if err := l.HoldAtLeast(time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
		sh1, err := c.TryAcquire(ctx, "shared", time.Minute, pglease.Shared())
		if err != nil {
			t.Fatalf("shared: %v", err)
		}
		sh2, err := c.TryAcquire(ctx, "shared", time.Minute, pglease.Shared())
		if err != nil {
			t.Fatalf("second shared: %v", err)
		}
		if err := sh1.Renew(ctx); err != nil {
			t.Fatal(err)
		}
		for _, l := range []*pglease.Lease{sh1, sh2} {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		p, err := c.TryAcquire(ctx, "sem", time.Minute, pglease.Permits(2))
		if err != nil {
			t.Fatalf("permit: %v", err)
		}
		if err := p.Renew(ctx); err != nil {
			t.Fatal(err)
		}
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
		ks, err := c.TryAcquireSet(ctx, []string{"set-a", "set-b"}, time.Minute)
		if err != nil {
			t.Fatalf("key set: %v", err)
		}
		if err := ks.Renew(ctx); err != nil {
			t.Fatal(err)
		}
		if err := ks.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := c.SweepExpired(ctx, 0); err != nil {
			t.Fatalf("sweep: %v", err)
		}
	})

	t.Run("waiting on a contended key, plain and fair, in parallel", func(t *testing.T) {
		for _, fair := range []bool{false, true} {
			var opts []pglease.Option
			if fair {
				opts = append(opts, pglease.WithFairWaiting())
			}
			holder := newClient(t)
			key := fmt.Sprintf("contended-%v", fair)
			l, err := holder.TryAcquire(ctx, key, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					w := newClient(t, append(opts, pglease.WithBackoff(5*time.Millisecond, 50*time.Millisecond))...)
					wl, err := w.Acquire(ctx, key, time.Minute)
					if err != nil {
						errs <- fmt.Errorf("fair=%v: %w", fair, err)
						return
					}
					errs <- wl.Release(ctx)
				}()
			}
			time.Sleep(100 * time.Millisecond)
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
		}
	})

	t.Run("the SQL functions", func(t *testing.T) {
		var fence int64
		if err := pool.QueryRow(ctx, "SELECT fence FROM "+q("pgfence_acquire")+"('sql', '1 min', 'me')").Scan(&fence); err != nil {
			t.Fatalf("pgfence_acquire: %v", err)
		}
		var e time.Time
		if err := pool.QueryRow(ctx, "SELECT expires_at FROM "+q("pgfence_renew")+"('sql', $1, '2 min')", fence).Scan(&e); err != nil {
			t.Fatalf("pgfence_renew: %v", err)
		}
		var released bool
		if err := pool.QueryRow(ctx, "SELECT released FROM "+q("pgfence_release")+"('sql', $1)", fence).Scan(&released); err != nil || !released {
			t.Fatalf("pgfence_release: %v %v", released, err)
		}
		for _, stmt := range []string{
			"SELECT fence FROM " + q("pgfence_acquire_shared") + "('sql-shared', false, '1 min', 'me')",
			"SELECT fence FROM " + q("pgfence_acquire_permit") + "('sql-sem', 3, '1 min', 'me')",
			"SELECT max(fence) FROM " + q("pgfence_acquire_set") + "(ARRAY['sql-x', 'sql-y'], '1 min', 'me')",
			"SELECT " + q("pgfence_next_fence") + "()",
		} {
			if err := pool.QueryRow(ctx, stmt).Scan(&fence); err != nil || fence <= 0 {
				t.Fatalf("%s: %d %v", stmt, fence, err)
			}
		}
	})

	t.Run("pgguard's guarded write and trigger on the service's own table", func(t *testing.T) {
		tbl := r.AppSchema + ".invoices"
		if _, err := pool.Exec(ctx, "CREATE TABLE "+tbl+" (id text PRIMARY KEY, status text NOT NULL, last_fence bigint NOT NULL DEFAULT 0);"+
			"INSERT INTO "+tbl+" VALUES ('inv', 'PENDING'), ('trg', 'PENDING')"); err != nil {
			t.Fatal(err)
		}
		c := newClient(t)
		l, err := c.TryAcquire(ctx, "invoice", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		g, err := pgguard.NewGuard(ctx, pool, pgguard.Table{Schema: r.AppSchema, Name: "invoices", KeyColumn: "id"}, pgguard.WithSchema(r.Schema))
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Update(ctx, pool, "inv", l.Fence(), pgguard.Values{"status": "SENT"}); err != nil {
			t.Fatalf("guarded write: %v", err)
		}
		tt := pgguard.Table{Schema: r.AppSchema, Name: "invoices"}
		if err := pgguard.InstallTrigger(ctx, pool, tt, pgguard.Strict, pgguard.WithSchema(r.Schema)); err != nil {
			t.Fatalf("install the trigger: %v", err)
		}
		write := func(fence int64) error {
			return pgguard.RunFenced(ctx, pool, fence, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "UPDATE "+tbl+" SET status = 'SENT' WHERE id = 'trg'")
				return err
			}, pgguard.WithSchema(r.Schema))
		}
		if err := write(l.Fence()); err != nil {
			t.Fatalf("fenced write: %v", err)
		}
		if err := write(l.Fence() - 1); !errors.Is(err, pgguard.ErrStaleFence) {
			t.Fatalf("a stale write: %v, want ErrStaleFence", err)
		}
	})

	t.Run("claim on the ready-made table and on the service's own", func(t *testing.T) {
		c, err := claim.New(ctx, pool, claim.WithSchema(r.Schema))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Enqueue(ctx, pool, claim.NewJob{Kind: "k"}); err != nil {
			t.Fatalf("enqueue: %v", err)
		}
		jobs, err := c.Claim(ctx, 5, time.Minute)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("claim: %v %v", jobs, err)
		}
		if err := c.Complete(ctx, jobs[0]); err != nil {
			t.Fatal(err)
		}
		own := r.AppSchema + ".emails"
		if _, err := pool.Exec(ctx, "CREATE TABLE "+own+` (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  state text NOT NULL DEFAULT 'available', priority integer NOT NULL DEFAULT 0, run_at timestamptz NOT NULL DEFAULT now(),
  attempt integer NOT NULL DEFAULT 0, max_attempts integer NOT NULL DEFAULT 3, fence bigint NOT NULL DEFAULT 0,
  owner text, expires_at timestamptz);
INSERT INTO `+own+" DEFAULT VALUES"); err != nil {
			t.Fatal(err)
		}
		oc, err := claim.New(ctx, pool, claim.WithSchema(r.Schema), claim.WithTable(claim.Table{Schema: r.AppSchema, Name: "emails",
			ID: "id", State: "state", Priority: "priority", RunAt: "run_at", Attempt: "attempt", MaxAttempts: "max_attempts",
			Fence: "fence", Owner: "owner", ExpiresAt: "expires_at"}))
		if err != nil {
			t.Fatal(err)
		}
		jobs, err = oc.Claim(ctx, 5, time.Minute)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("claim on the own table: %v %v", jobs, err)
		}
		if err := oc.Complete(ctx, jobs[0]); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("what the role may not do", func(t *testing.T) {
		for _, stmt := range []string{
			"SELECT setval('" + q("pgfence_fence_seq") + "', 1)",
			"INSERT INTO " + q("lock_leases") + " (lock_key, owner, owner_token, fence, acquired_at, expires_at) VALUES ('x', 'o', 't', 1, now(), 'infinity')",
			"UPDATE " + q("lock_leases") + " SET expires_at = now() - interval '1 s'",
			"UPDATE " + q("lock_leases") + " SET fence = 1",
			"DELETE FROM " + q("lock_leases"),
			"TRUNCATE " + q("lock_leases"),
			"SELECT owner_token FROM " + q("lock_leases"),
			"SELECT owner_token FROM " + q("pgfence_waiters"),
			"SELECT * FROM " + q("pgfence_abandoned_tokens"),
			"DELETE FROM " + q("pgfence_waiters"),
			"SELECT nextval('" + q("pgfence_waiter_seq") + "')",
			"SELECT " + q("pgfence_lock_key") + "('x')",
		} {
			_, err := pool.Exec(ctx, stmt)
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "42501" {
				t.Errorf("%s: %v, want SQLSTATE 42501", stmt, err)
			}
		}
		// Through the functions, the bounds hold: no lease for longer than
		// 24 hours, no row under an empty owner token (the owner token of a
		// shared key's summary row).
		for _, stmt := range []string{
			"SELECT * FROM " + q("pgfence_lease_acquire") + "('long', 'me', 'tok', 1000000000000)",
			"SELECT * FROM " + q("pgfence_lease_abandon") + "('shared', '', false)",
			"SELECT * FROM " + q("pgfence_abandon_grant") + "('shared', '')",
			"SELECT * FROM " + q("pgfence_sweep_leases") + "('', -1, 100, -60000000)",
			"SELECT * FROM " + q("pgfence_release_grant") + "('shared', 1, 100000000000, false, false)",
		} {
			_, err := pool.Exec(ctx, stmt)
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "PF005" {
				t.Errorf("%s: %v, want SQLSTATE PF005", stmt, err)
			}
		}
	})

	t.Run("a role without the grant is told what to run", func(t *testing.T) {
		np := poolOn(t, r.NobodyURL)
		c, err := pglease.New(np, pglease.WithSchema(r.Schema))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		want := "GRANT pgfence_client TO " + r.Nobody
		_, err = c.TryAcquire(ctx, "k", time.Minute)
		var pe *pgdb.PrivilegeError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), want) {
			t.Fatalf("TryAcquire without the grant: %v, want a message with %q", err, want)
		}
		// Through the search_path: the schema it may not use is left out of
		// the path, and the function is not found; it is not missing.
		cfg, err := pgxpool.ParseConfig(r.NobodyURL)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{r.Schema}.Sanitize()
		sp, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer sp.Close()
		c2, err := pglease.New(sp)
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		_, err = c2.TryAcquire(ctx, "k", time.Minute)
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "missing") {
			t.Fatalf("TryAcquire through the search_path without the grant: %v, want a message with %q", err, want)
		}
	})
}

// Down to version 13 gives back exactly the catalog of a fresh version 13,
// privileges and function attributes included, and leaves pgfence_client
// to the other schemas that use it; up again works.
func TestClientRoleDown(t *testing.T) {
	ctx := context.Background()
	fresh := pgtest.BareDatabase(t)
	upTo(t, fresh, 13)
	down := pgtest.BareDatabase(t)
	pool := poolOn(t, down)
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Force(ctx, pool, 14); err != nil {
		t.Fatal(err)
	}
	b, err := fs.ReadFile(migrations.FS(), "000014_client_role.down.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, string(b)); err != nil {
		t.Fatalf("down: %v", err)
	}
	if d := pgtest.DiffLines(pgtest.DumpSchema(t, fresh, versionTables...), pgtest.DumpSchema(t, down, versionTables...)); d != "" {
		t.Fatalf("the catalog after down differs from version 13's: %s", d)
	}
	if a, b := privileges(t, fresh), privileges(t, down); a != b {
		t.Fatalf("privileges after down differ from version 13's:\n%s\nvs\n%s", b, a)
	}
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = 'pgfence_client')").Scan(&exists); err != nil || !exists {
		t.Fatalf("pgfence_client after down in one database of many: exists %v (%v), want kept for the others", exists, err)
	}
	if err := migrations.Force(ctx, pool, 13); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatalf("up again after down: %v", err)
	}
	leaseWorks(t, pool)
}

// privileges lists the access privileges of the public schema and of every
// object and column in it, each as a sorted set (an ACL equal to the
// default counts as the default).
func privileges(t *testing.T, url string) string {
	t.Helper()
	var s string
	err := poolOn(t, url).QueryRow(context.Background(), `
WITH o AS (
  SELECT 'schema ' || n.nspname AS what, coalesce(n.nspacl, acldefault('n'::"char", n.nspowner)) AS acl
    FROM pg_namespace AS n WHERE n.nspname = 'public'
  UNION ALL
  SELECT 'relation ' || c.relname, coalesce(c.relacl, acldefault((CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END)::"char", c.relowner))
    FROM pg_class AS c WHERE c.relnamespace = 'public'::regnamespace AND c.relname <> 'pgfence_schema_migrations'
  UNION ALL
  SELECT 'column ' || c.relname || '.' || a.attname, coalesce(a.attacl, '{}')
    FROM pg_attribute AS a JOIN pg_class AS c ON c.oid = a.attrelid
   WHERE c.relnamespace = 'public'::regnamespace AND a.attnum > 0
  UNION ALL
  SELECT 'function ' || p.oid::regprocedure::text || ' secdef=' || p.prosecdef || ' config=' || coalesce(p.proconfig::text, ''),
         coalesce(p.proacl, acldefault('f'::"char", p.proowner))
    FROM pg_proc AS p WHERE p.pronamespace = 'public'::regnamespace
)
SELECT string_agg(o.what || ': ' || (SELECT coalesce(string_agg(x::text, ',' ORDER BY x::text), '') FROM unnest(o.acl) AS x), E'\n' ORDER BY o.what)
  FROM o`).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
