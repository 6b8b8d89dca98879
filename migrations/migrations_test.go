package migrations_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/internal/dbenv"
	"github.com/pgfence/pgfence/internal/pgtest"
	"github.com/pgfence/pgfence/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// bareDatabase creates an empty database (no migrations) on the test server
// and returns a pool on it; both go away when the test ends.
func bareDatabase(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	name := fmt.Sprintf("pgfence_mig_%d", rand.Int64())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), pgtest.ServerURL())
		if err == nil {
			c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(context.Background())
		}
	})
	cfg, err := pgx.ParseConfig(pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = name
	pool, err := pgxpool.New(ctx, dbenv.ConnString(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Eight instances run Up at once on a fresh database: all succeed, the
// schema is applied once, and a later Up is a no-op.
func TestConcurrentUpIsSafeAndIdempotent(t *testing.T) {
	ctx := context.Background()
	pool := bareDatabase(t)
	latest, err := migrations.Latest()
	if err != nil {
		t.Fatal(err)
	}
	if v, dirty, err := migrations.Version(ctx, pool); err != nil || v != 0 || dirty {
		t.Fatalf("fresh database: version %d dirty %v err %v", v, dirty, err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each instance has a pool of its own, as separate processes do.
			p, err := pgxpool.New(ctx, pool.Config().ConnString())
			if err != nil {
				errs <- err
				return
			}
			defer p.Close()
			errs <- migrations.Up(ctx, p)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Up: %v", err)
		}
	}
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatalf("second Up: %v", err)
	}
	v, dirty, err := migrations.Version(ctx, pool)
	if err != nil || v != latest || dirty {
		t.Fatalf("after Up: version %d (latest %d) dirty %v err %v", v, latest, dirty, err)
	}
	var tables int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE tablename IN ('lock_leases', 'pgfence_schema_migrations', 'schema_migrations')`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 2 {
		t.Fatalf("want lock_leases and pgfence_schema_migrations only (never the application's schema_migrations), found %d tables", tables)
	}
}

// Down removes everything Up made; Up again restores it.
func TestDownThenUp(t *testing.T) {
	ctx := context.Background()
	pool := bareDatabase(t)
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Down(ctx, pool); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'pgfence_schema_migrations'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("Down left %d tables", n)
	}
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	var fence int64
	if err := pool.QueryRow(ctx, `SELECT pgfence_next_fence()`).Scan(&fence); err != nil || fence <= 0 {
		t.Fatalf("fence source after Down and Up: %d %v", fence, err)
	}
}

func TestNilPool(t *testing.T) {
	if err := migrations.Up(context.Background(), nil); err == nil {
		t.Fatal("Up(nil) succeeded")
	}
}
