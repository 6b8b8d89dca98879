package pgdb_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/internal/pgdb"
	"github.com/pgfence/pgfence/internal/testsupport/dbenv"
	"github.com/pgfence/pgfence/internal/testsupport/needtool"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// detect runs DetectPooling on a connection hijacked from pool, as the
// listener does, several times over (each answer must be the same).
func detect(t *testing.T, pool *pgxpool.Pool) pgdb.Pooling {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var first pgdb.Pooling
	for i := range 5 {
		pc, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conn := pc.Hijack()
		got, err := pgdb.DetectPooling(ctx, conn, pool)
		conn.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = got
		} else if got != first {
			t.Fatalf("DetectPooling said %v, then %v", first, got)
		}
	}
	return first
}

func TestDetectPoolingDirect(t *testing.T) {
	if got := detect(t, pgtest.Pool(t)); got != pgdb.PoolingNone {
		t.Fatalf("direct pool: %v", got)
	}
}

// Behind PgBouncer in transaction mode, also while more clients than it
// has server sessions (8) keep them all busy.
func TestDetectPoolingTransactionPooler(t *testing.T) {
	pool := pgtest.BouncerPool(t)
	if got := detect(t, pool); got != pgdb.PoolingTransaction {
		t.Fatalf("transaction pooler: %v", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	busy := pgtest.BouncerPool(t, func(c *pgxpool.Config) { c.MaxConns = 12 })
	done := make(chan struct{})
	for range 12 {
		go func() {
			defer func() { done <- struct{}{} }()
			for ctx.Err() == nil {
				busy.Exec(ctx, "SELECT pg_sleep(0.001)")
			}
		}()
	}
	got := detect(t, pool)
	cancel()
	for range 12 {
		<-done
	}
	if got != pgdb.PoolingTransaction {
		t.Fatalf("busy transaction pooler: %v", got)
	}
}

// A PgBouncer in session mode keeps a server session per client
// connection: LISTEN would work there.
func TestDetectPoolingSessionPooler(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := dbenv.StartBouncerMode(ctx, pgtest.ServerURL(), "session", os.Stderr)
	if errors.Is(err, dbenv.ErrNoBouncer) {
		needtool.Bouncer.Missing(t, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	cfg, err := pgx.ParseConfig(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, b.URL(cfg.Database))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if got := detect(t, pool); got != pgdb.PoolingSession {
		t.Fatalf("session pooler: %v", got)
	}
}
