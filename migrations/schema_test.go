package migrations_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/migrations"
	"github.com/pgfence/pgfence/pgguard"
	"github.com/pgfence/pgfence/pglease"
)

// schemaPool opens a pool on the database of base whose connections use
// schema (pgtest.InSchema); "" keeps the default search_path.
func schemaPool(t *testing.T, base *pgxpool.Pool, schema string) *pgxpool.Pool {
	t.Helper()
	cfg := base.Config()
	if schema != "" {
		pgtest.InSchema(schema)(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Two schemas and the default layout side by side in one database: each is
// a pgfence of its own (leases, fences, jobs, guarded writes), and reverting
// one leaves the others working.
func TestSchemasSideBySide(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := bareDatabase(t)
	pgtest.Step(t, "Up into the default layout and two schemas, twice", func(t *testing.T) {
		if err := migrations.Up(ctx, base); err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"alpha", "Beta Fences"} {
			if err := migrations.Up(ctx, base, migrations.WithSchema(s)); err != nil {
				t.Fatalf("Up(%q): %v", s, err)
			}
			if err := migrations.Up(ctx, base, migrations.WithSchema(s)); err != nil {
				t.Fatalf("second Up(%q): %v", s, err)
			}
		}
	})

	pgtest.Step(t, "every object lives in its schema", func(t *testing.T) {
		latest, err := migrations.Latest()
		if err != nil {
			t.Fatal(err)
		}
		// Every object lives in its schema, the version table included.
		for _, s := range []string{"public", "alpha", "Beta Fences"} {
			var n int
			err := base.QueryRow(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
				WHERE n.nspname = $1 AND c.relname IN ('lock_leases', 'payout_intents', 'pgfence_jobs',
				'pgfence_abandoned_tokens', 'pgfence_fence_seq', 'pgfence_stale_refusals', 'pgfence_schema_migrations')`, s).Scan(&n)
			if err != nil || n != 7 {
				t.Fatalf("schema %q has %d of pgfence's 7 relations (err %v)", s, n, err)
			}
			opts := []migrations.Option{migrations.WithSchema(s)}
			if s == "public" {
				opts = nil
			}
			if v, dirty, err := version(ctx, base, opts...); err != nil || dirty || v != latest {
				t.Fatalf("Version(%q) = %d %v %v, want %d", s, v, dirty, err, latest)
			}
		}
	})

	def, a, b := schemaPool(t, base, ""), schemaPool(t, base, "alpha"), schemaPool(t, base, "Beta Fences")
	// alpha's client, used by the lease and the guarded-write steps.
	ca, err := pglease.New(a, pglease.WithoutAutoRenew())
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	// The fences each layout handed out so far, newest last.
	fences := map[string][]int64{}

	pgtest.Step(t, "a lease in one schema is invisible in the others", func(t *testing.T) {
		// A lease in alpha is invisible in Beta Fences and in the default layout.
		la, err := ca.TryAcquire(ctx, "shared-key", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		fences["alpha"] = []int64{la.Fence()}
		for name, pool := range map[string]*pgxpool.Pool{"default": def, "Beta Fences": b} {
			c, err := pglease.New(pool, pglease.WithoutAutoRenew())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, ok, err := c.Holder(ctx, "shared-key"); err != nil || ok {
				t.Fatalf("%s sees alpha's lease: ok=%v err=%v", name, ok, err)
			}
			l, err := c.TryAcquire(ctx, "shared-key", time.Minute)
			if err != nil {
				t.Fatalf("%s: the key is held in alpha only, acquire: %v", name, err)
			}
			fences[name] = append(fences[name], l.Fence())
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := la.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})

	pgtest.Step(t, "fences rise per schema", func(t *testing.T) {
		// Fences keep rising per schema, whatever the others draw.
		for round := 0; round < 3; round++ {
			for name, pool := range map[string]*pgxpool.Pool{"default": def, "alpha": a, "Beta Fences": b} {
				c, err := pglease.New(pool, pglease.WithoutAutoRenew())
				if err != nil {
					t.Fatal(err)
				}
				l, err := c.TryAcquire(ctx, "shared-key", time.Minute)
				if err != nil {
					t.Fatalf("%s round %d: %v", name, round, err)
				}
				prev := fences[name]
				if f := l.Fence(); f <= prev[len(prev)-1] {
					t.Fatalf("%s: fence %d after %d", name, f, prev[len(prev)-1])
				}
				fences[name] = append(prev, l.Fence())
				l.Release(ctx)
				c.Close()
			}
		}
	})

	pgtest.Step(t, "guarded writes and the trigger in alpha", func(t *testing.T) {
		// A guarded write and the trigger in alpha, on a table of alpha's.
		if _, err := a.Exec(ctx, `CREATE TABLE invoices (id text PRIMARY KEY, status text NOT NULL, last_fence bigint NOT NULL DEFAULT 0)`); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Exec(ctx, `INSERT INTO invoices (id, status) VALUES ('inv-1', 'PENDING')`); err != nil {
			t.Fatal(err)
		}
		tbl := pgguard.Table{Name: "invoices", KeyColumn: "id"}
		if err := pgguard.InstallTrigger(ctx, a, tbl, pgguard.Strict); err != nil {
			t.Fatal(err)
		}
		g, err := pgguard.NewGuard(ctx, a, tbl)
		if err != nil {
			t.Fatal(err)
		}
		older, err := ca.TryAcquire(ctx, "inv-1", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		older.Release(ctx)
		newer, err := ca.TryAcquire(ctx, "inv-1", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer newer.Release(ctx)
		if err := g.Update(ctx, a, "inv-1", newer.Fence(), pgguard.Values{"status": "SENT"}); err != nil {
			t.Fatalf("guarded write with the newest fence: %v", err)
		}
		err = g.Update(ctx, a, "inv-1", older.Fence(), pgguard.Values{"status": "AGAIN"})
		if !errors.Is(err, pgguard.ErrStaleFence) {
			t.Fatalf("guarded write with an older fence: %v, want ErrStaleFence", err)
		}
		// The trigger refuses a plain UPDATE under the older fence too.
		err = pgguard.RunFenced(ctx, a, older.Fence(), func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE invoices SET status = 'RAW' WHERE id = 'inv-1'`)
			return err
		})
		if !errors.Is(pgguard.Classify(err), pgguard.ErrStaleFence) {
			t.Fatalf("trigger under an older fence: %v, want ErrStaleFence", err)
		}
	})

	pgtest.Step(t, "claims stay in their schema", func(t *testing.T) {
		// A claimer on Beta Fences' jobs table: alpha's queue stays untouched.
		enq, err := claim.New(ctx, b, claim.WithQueue("mail"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := enq.Enqueue(ctx, b, claim.NewJob{Kind: "k"}); err != nil {
			t.Fatal(err)
		}
		claimA, err := claim.New(ctx, a, claim.WithQueue("mail"))
		if err != nil {
			t.Fatal(err)
		}
		if jobs, err := claimA.Claim(ctx, 10, time.Minute); err != nil || len(jobs) != 0 {
			t.Fatalf("alpha claimed %d of Beta Fences' jobs (err %v)", len(jobs), err)
		}
		claimB, err := claim.New(ctx, b, claim.WithQueue("mail"))
		if err != nil {
			t.Fatal(err)
		}
		jobs, err := claimB.Claim(ctx, 10, time.Minute)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("Beta Fences claimed %d jobs (err %v), want 1", len(jobs), err)
		}
		if err := claimB.Complete(ctx, jobs[0]); err != nil {
			t.Fatal(err)
		}
	})

	pgtest.Step(t, "Down of one schema leaves the others working", func(t *testing.T) {
		// Reverting Beta Fences leaves alpha and the default layout intact.
		if err := migrations.Down(ctx, base, migrations.WithSchema("Beta Fences")); err != nil {
			t.Fatal(err)
		}
		if v, _, err := version(ctx, base, migrations.WithSchema("Beta Fences")); err != nil || v != 0 {
			t.Fatalf("Version after Down = %d %v, want 0", v, err)
		}
		for name, pool := range map[string]*pgxpool.Pool{"default": def, "alpha": a} {
			c, err := pglease.New(pool, pglease.WithoutAutoRenew())
			if err != nil {
				t.Fatal(err)
			}
			l, err := c.TryAcquire(ctx, "after-down", time.Minute)
			if err != nil {
				t.Fatalf("%s after Beta Fences' Down: %v", name, err)
			}
			prev := fences[name]
			if l.Fence() <= prev[len(prev)-1] {
				t.Fatalf("%s: fence %d after %d", name, l.Fence(), prev[len(prev)-1])
			}
			l.Release(ctx)
			c.Close()
		}
	})
}

func TestSchemaInput(t *testing.T) {
	ctx := context.Background()
	base := bareDatabase(t)
	for _, bad := range []string{`x"; DROP TABLE y; --`, " lead", "a/*b", "x$$y"} {
		if err := migrations.Up(ctx, base, migrations.WithSchema(bad)); !errors.Is(err, pgfence.ErrInvalidInput) {
			t.Errorf("Up(WithSchema(%q)) = %v, want pgfence.ErrInvalidInput", bad, err)
		}
	}
	var n int
	if err := base.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname NOT LIKE 'pg_%' AND nspname NOT IN ('public', 'information_schema')`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("refused input created %d schemas (err %v)", n, err)
	}
	// Only Up creates a schema; the others say so.
	if _, _, err := version(ctx, base, migrations.WithSchema("missing")); !errors.Is(err, migrations.ErrNoSuchSchema) {
		t.Fatalf("Version on a missing schema: %v, want ErrNoSuchSchema", err)
	}
	if err := migrations.Down(ctx, base, migrations.WithSchema("missing")); !errors.Is(err, migrations.ErrNoSuchSchema) {
		t.Fatalf("Down on a missing schema: %v, want ErrNoSuchSchema", err)
	}
	// The connections those calls opened and refused are closed, not left
	// to the garbage collector: the database's only sessions are the pool's.
	deadline := time.Now().Add(5 * time.Second)
	for {
		var sessions int32
		if err := base.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()").Scan(&sessions); err != nil {
			t.Fatal(err)
		}
		if pooled := base.Stat().TotalConns(); sessions <= pooled {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("%d server sessions on the database, the pool has %d: refused migration connections were left open", sessions, pooled)
		}
		time.Sleep(50 * time.Millisecond) // a closed socket's backend exits shortly after
	}
	closesWithin(t, base)
}
