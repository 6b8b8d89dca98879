package pglease_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// A plain lease table and its two raw statements, the textbook pair:
// an upsert that raises a per-row counter, and an UPDATE that expires the
// lease. Both commit as the session says (durably, by default). They are the
// yardstick: pgfence must be as fast while keeping every guarantee.
const (
	seedTable = `CREATE TABLE IF NOT EXISTS bench_seed_leases (
  lock_key   text        PRIMARY KEY,
  owner      text        NOT NULL,
  fence      bigint      NOT NULL,
  expires_at timestamptz NOT NULL
)`
	seedAcquire = `INSERT INTO bench_seed_leases (lock_key, owner, fence, expires_at)
VALUES ($1, $2, 1, now() + interval '30 seconds')
ON CONFLICT (lock_key) DO UPDATE
   SET owner      = EXCLUDED.owner,
       fence      = bench_seed_leases.fence + 1,
       expires_at = EXCLUDED.expires_at
 WHERE bench_seed_leases.expires_at <= now()
RETURNING fence`
	seedRelease = `UPDATE bench_seed_leases SET expires_at = now() WHERE lock_key = $1 AND fence = $2`
)

// benchKeys is how many keys the clients share out (each client works its
// own slice of them, so the figures measure cost, not contention).
const benchKeys = 10_000

// BenchmarkAcquireRelease measures acquire + release pairs per second on
// 10,000 keys at 1, 8 and 32 concurrent clients, for three contenders run
// side by side in one process, alternating over several rounds:
//
//   - pgfence: Client.TryAcquire + Lease.Release (auto-renewal on, as by
//     default);
//   - seed: the textbook pair of raw statements through pgx, on a plain
//     lease table (see seedAcquire, seedRelease);
//   - sql: pgfence's own two statements sent raw through pgx, which
//     separates the statements' cost from the client's.
//
// Each round runs every contender for PGFENCE_BENCH_PHASE (default 2s), in an
// order that rotates from round to round; PGFENCE_BENCH_ROUNDS rounds
// (default 3). It reports the median pairs/s of each contender and the ratio
// pgfence/seed (median of the per-round ratios), the figure the targets are
// stated in. Run it once (-benchtime 1x) against a server with fsync on:
//
//	psql -h 127.0.0.1 -U postgres -c 'CREATE DATABASE leaseperf_bench'
//	PGFENCE_DATABASE_URL=postgres://postgres@127.0.0.1:5432/leaseperf_bench \
//	  PGFENCE_BENCH_ROUNDS=5 PGFENCE_BENCH_PHASE=3s \
//	  go test -run '^$' -bench AcquireRelease -benchtime 1x ./pglease/
//
// (pgtest creates, migrates and drops a database of its own on that server.)
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	rounds := envInt(b, "PGFENCE_BENCH_ROUNDS", 3)
	phase := envDuration(b, "PGFENCE_BENCH_PHASE", 2*time.Second)
	pool := pgtest.Pool(b, func(cfg *pgxpool.Config) { cfg.MaxConns = 40 })
	prepareBench(b, pool)
	c, err := pglease.New(pool, pglease.WithOwner("bench"))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()

	contenders := []struct {
		name string
		pair func(ctx context.Context, key string) error
	}{
		{"pgfence", func(ctx context.Context, key string) error {
			l, err := c.TryAcquire(ctx, key, 30*time.Second)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}},
		{"seed", func(ctx context.Context, key string) error {
			var fence int64
			if err := pool.QueryRow(ctx, seedAcquire, key, "bench").Scan(&fence); err != nil {
				return err
			}
			_, err := pool.Exec(ctx, seedRelease, key, fence)
			return err
		}},
		{"sql", func(ctx context.Context, key string) error {
			q := fencedb.New(pool)
			row, err := q.Acquire(ctx, fencedb.AcquireParams{LockKey: key, Owner: "bench", OwnerToken: key, TtlMicros: 30e6})
			if err != nil {
				return err
			}
			_, err = q.Release(ctx, fencedb.ReleaseParams{LockKey: key, Fence: row.Fence})
			return err
		}},
	}

	for _, clients := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			rates := map[string][]float64{}
			var ratios []float64
			for r := range rounds {
				for i := range contenders {
					ct := contenders[(r+i)%len(contenders)]
					rates[ct.name] = append(rates[ct.name], runPhase(b, ctx, clients, phase, ct.pair))
				}
				ratios = append(ratios, rates["pgfence"][r]/rates["seed"][r])
			}
			var line strings.Builder
			for _, ct := range contenders {
				b.ReportMetric(median(rates[ct.name]), ct.name+"_pairs/s")
				fmt.Fprintf(&line, " %s %.0f", ct.name, rates[ct.name])
			}
			b.ReportMetric(median(ratios), "pgfence/seed")
			b.Logf("clients=%d pairs/s per round:%s; pgfence/seed per round %.2f", clients, line.String(), ratios)
		})
	}
}

// prepareBench creates the plain lease table and puts benchKeys expired rows in
// it and in lock_leases, so that every measured acquisition takes the same
// path (an update of an expired row) from the first round on.
func prepareBench(b *testing.B, pool *pgxpool.Pool) {
	ctx := context.Background()
	for _, sql := range []string{
		seedTable,
		`INSERT INTO bench_seed_leases SELECT 'bench/' || i, 'bench', 1, now() - interval '1 second'
		   FROM generate_series(0, 9999) AS i ON CONFLICT DO NOTHING`,
		`INSERT INTO lock_leases (lock_key, owner, owner_token, fence, acquired_at, expires_at)
		 SELECT 'bench/' || i, 'bench', 'bench/' || i, pgfence_draw_fence(), now(), now() - interval '1 second'
		   FROM generate_series(0, 9999) AS i ON CONFLICT DO NOTHING`,
		`VACUUM ANALYZE bench_seed_leases`,
		`VACUUM ANALYZE lock_leases`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			b.Fatal(err)
		}
	}
}

// runPhase runs pair on clients goroutines for d, each on its own keys out
// of benchKeys, and returns pairs per second.
func runPhase(b *testing.B, ctx context.Context, clients int, d time.Duration, pair func(context.Context, string) error) float64 {
	b.Helper()
	stop := time.Now().Add(d)
	counts := make([]int, clients)
	var wg sync.WaitGroup
	var once sync.Once
	start := time.Now()
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			keys := make([]string, 0, benchKeys/clients+1)
			for k := i; k < benchKeys; k += clients {
				keys = append(keys, fmt.Sprintf("bench/%d", k))
			}
			for n := 0; time.Now().Before(stop); n++ {
				if err := pair(ctx, keys[n%len(keys)]); err != nil {
					once.Do(func() { b.Errorf("client %d: %v", i, err) })
					return
				}
				counts[i]++
			}
		}()
	}
	wg.Wait()
	total := 0
	for _, n := range counts {
		total += n
	}
	return float64(total) / time.Since(start).Seconds()
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var n int
	if _, err := fmt.Sscan(v, &n); err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func envDuration(b *testing.B, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		b.Fatalf("%s=%q: want a positive duration such as 3s", name, v)
	}
	return d
}
