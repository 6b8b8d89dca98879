package pglease_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// BenchmarkAcquireRelease compares one TryAcquire + Release through the
// library (auto-renewal on, as by default) with the same two statements sent
// raw through pgx, side by side in one run. Each goroutine works its own key,
// so the figures measure overhead, not contention.
//
//	PGFENCE_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
//	  go test -run '^$' -bench AcquireRelease -benchtime 2s -count 8 ./pglease/ | tee bench.txt
//	benchstat -col /impl bench.txt
func BenchmarkAcquireRelease(b *testing.B) {
	pool := pgtest.Pool(b, func(cfg *pgxpool.Config) { cfg.MaxConns = 32 })
	c, err := pglease.New(pool)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	raw := func(ctx context.Context, key string) error {
		var fence int64
		var expires time.Time
		if err := pool.QueryRow(ctx, fencedb.Acquire, key, "bench", "token", int64(30e6)).Scan(&fence, &expires); err != nil {
			return err
		}
		var held bool
		return pool.QueryRow(ctx, fencedb.Release, false, key, fence).Scan(&held) // $1: notify
	}
	lib := func(ctx context.Context, key string) error {
		l, err := c.TryAcquire(ctx, key, 30*time.Second)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
	for _, g := range []int{1, 8, 32} {
		for _, impl := range []struct {
			name string
			fn   func(context.Context, string) error
		}{{"library", lib}, {"raw", raw}} {
			b.Run(fmt.Sprintf("goroutines=%d/impl=%s", g, impl.name), func(b *testing.B) {
				runSplit(b, g, impl.fn)
			})
		}
	}
}

// runSplit shares b.N iterations among g goroutines, each on its own key.
func runSplit(b *testing.B, g int, fn func(context.Context, string) error) {
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("bench/%s/%d", b.Name(), i)
			for next.Add(1) <= int64(b.N) {
				if err := fn(ctx, key); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}
