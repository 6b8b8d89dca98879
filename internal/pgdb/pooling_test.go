package pgdb_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/internal/pgdb"
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

// Behind PgBouncer in transaction mode, idle, then while other clients keep
// some of its 8 server sessions busy, then more clients than it has.
func TestDetectPoolingTransactionPooler(t *testing.T) {
	pool := pgtest.BouncerPool(t)
	for _, busy := range []int{0, 4, 12} {
		t.Run(fmt.Sprintf("busy=%d", busy), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			defer wg.Wait() // after cancel: deferred calls run last first
			defer cancel()
			if busy > 0 {
				others := pgtest.BouncerPool(t, func(c *pgxpool.Config) { c.MaxConns = int32(busy) })
				for range busy {
					wg.Go(func() {
						for ctx.Err() == nil {
							others.Exec(ctx, "SELECT pg_sleep(0.001)")
						}
					})
				}
			}
			if got := detect(t, pool); got != pgdb.PoolingTransaction {
				t.Fatalf("transaction pooler: %v", got)
			}
		})
	}
}

// A PgBouncer in session mode keeps a server session per client
// connection: LISTEN would work there.
func TestDetectPoolingSessionPooler(t *testing.T) {
	if got := detect(t, pgtest.SessionBouncerPool(t)); got != pgdb.PoolingSession {
		t.Fatalf("session pooler: %v", got)
	}
}
