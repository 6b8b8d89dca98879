package migrations_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4/database"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jackc/pgerrcode"
	"github.com/pgfence/pgfence/internal/testsupport/dbenv"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/migrations"
)

func TestMain(m *testing.M) { pgtest.MainWithURL(m) }

// bareDatabase creates an empty database (no migrations) on the test server
// and returns a pool on it; both go away when the test ends.
func bareDatabase(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), pgtest.BareDatabase(t))
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
	if v, dirty, err := version(ctx, pool); err != nil || v != 0 || dirty {
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
	v, dirty, err := version(ctx, pool)
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

// closesWithin fails the test if pool.Close blocks: a connection that a
// failed migration kept checked out would make it block forever.
func closesWithin(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	done := make(chan struct{})
	go func() { pool.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("pool.Close blocked: a migration kept a connection")
	}
}

// A table of pgfence's name that already exists: Up fails with the server's
// error (42P07, naming the table, without the SQL file), leaves no dirty
// version behind, and keeps no connection.
func TestUpOnConflictingObject(t *testing.T) {
	ctx := context.Background()
	pool := bareDatabase(t)
	if _, err := pool.Exec(ctx, "CREATE TABLE lock_leases (id int)"); err != nil {
		t.Fatal(err)
	}
	err := migrations.Up(ctx, pool)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.DuplicateTable || !strings.Contains(err.Error(), "lock_leases") {
		t.Fatalf("want 42P07 naming lock_leases, got %v", err)
	}
	if strings.Contains(err.Error(), "CREATE TABLE") {
		t.Fatalf("the error carries the SQL file: %v", err)
	}
	v, dirty, err := version(ctx, pool)
	if err != nil || dirty || v != 0 {
		t.Fatalf("after the failed Up: version %d dirty %v err %v (want 0, clean)", v, dirty, err)
	}
	closesWithin(t, pool)
}

// Force clears a dirty version, as golang-migrate's CLI does.
func TestForce(t *testing.T) {
	ctx := context.Background()
	pool := bareDatabase(t)
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "UPDATE "+migrations.Table+" SET dirty = true"); err != nil {
		t.Fatal(err)
	}
	if _, dirty, _ := version(ctx, pool); !dirty {
		t.Fatal("not dirty")
	}
	latest, _ := migrations.Latest()
	if err := migrations.Force(ctx, pool, int(latest)); err != nil {
		t.Fatal(err)
	}
	if v, dirty, err := version(ctx, pool); err != nil || dirty || v != latest {
		t.Fatalf("after Force: %d %v %v", v, dirty, err)
	}
}

// Another session holds golang-migrate's lock: Up waits for it only as long
// as its context, then returns, and keeps no connection.
func TestUpWaitsNoLongerThanContext(t *testing.T) {
	ctx := context.Background()
	pool := bareDatabase(t)
	var db, schema string
	if err := pool.QueryRow(ctx, "SELECT current_database(), current_schema()").Scan(&db, &schema); err != nil {
		t.Fatal(err)
	}
	id, err := database.GenerateAdvisoryLockId(db, schema, migrations.Table)
	if err != nil {
		t.Fatal(err)
	}
	holder, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1::bigint)", id); err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	start := time.Now()
	err = migrations.Up(dctx, pool)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want DeadlineExceeded, got %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Up returned %v after its deadline", took-time.Second)
	}
	holder.Exec(ctx, "SELECT pg_advisory_unlock_all()")
	holder.Release()
	closesWithin(t, pool)
}

// Four instances run Up at once through PgBouncer in transaction mode: each
// is refused at once with ErrBehindPooler ("run migrations on a direct
// connection"), none hangs past its deadline, and no connection stays out.
func TestConcurrentUpThroughBouncerIsRefused(t *testing.T) {
	bare := bareDatabase(t)
	cfg := bare.Config().ConnConfig
	bouncerURL := pgtest.BouncerURL(t)
	bcfg, err := pgx.ParseConfig(bouncerURL)
	if err != nil {
		t.Fatal(err)
	}
	bcfg.Database = cfg.Database
	url := dbenv.ConnString(bcfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := pgxpool.New(ctx, url)
			if err != nil {
				errs <- err
				return
			}
			defer closesWithin(t, p)
			errs <- migrations.Up(ctx, p)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, migrations.ErrBehindPooler) || !strings.Contains(err.Error(), "run migrations on a direct connection") {
			t.Fatalf("Up through the bouncer: want ErrBehindPooler, got %v", err)
		}
	}
	if ctx.Err() != nil {
		t.Fatal("Up through the bouncer ran into the deadline")
	}
	if v, _, err := version(context.Background(), bare); err != nil || v != 0 {
		t.Fatalf("something was applied: version %d %v", v, err)
	}
}

// version is the applied version and whether it is dirty, as Inspect reads
// them.
func version(ctx context.Context, pool *pgxpool.Pool, opts ...migrations.Option) (uint, bool, error) {
	st, err := migrations.Inspect(ctx, pool, opts...)
	return st.Version, st.Dirty, err
}
