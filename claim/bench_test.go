package claim_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// The raw SQL of the same claim and complete, written by hand for
// pgfence_jobs, to measure what the library adds.
const (
	rawClaim = `WITH picked AS (
  SELECT id FROM pgfence_jobs
   WHERE state = 'available' AND run_at <= now() AND queue = $4
   ORDER BY priority, run_at, id
   LIMIT $1
   FOR UPDATE SKIP LOCKED
)
UPDATE pgfence_jobs AS j
   SET state = 'running', attempt = j.attempt + 1, fence = pgfence_next_fence(),
       owner = $2, expires_at = now() + $3::bigint * interval '1 microsecond'
  FROM picked, (SELECT set_config('synchronous_commit', 'on', true)) AS settings
 WHERE j.id = picked.id
RETURNING j.id, j.fence`
	rawComplete = `UPDATE pgfence_jobs SET state = 'completed', finished_at = now()
 WHERE id = $1 AND fence = $2 AND state = 'running'`
)

var benchQueue atomic.Int64

// BenchmarkClaimComplete measures claim + complete throughput with 8
// workers, for batch sizes 1 and 100, through the Claimer and through the
// same SQL written by hand; and through a Pool of 8 workers (which claims at
// most as many jobs as it has idle workers). One op is one job. Point it at
// a server with fsync on for realistic figures:
//
//	PGFENCE_DATABASE_URL='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable' \
//	  go test -run '^$' -bench ClaimComplete -benchtime 5000x ./claim/
func BenchmarkClaimComplete(b *testing.B) {
	pool := pgtest.Pool(b, func(c *pgxpool.Config) { c.MaxConns = 16 })
	const workers = 8
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d/pgfence", batch), func(b *testing.B) {
			queue := setupBench(b, pool)
			c, err := claim.New(context.Background(), pool, claim.WithQueue(queue))
			if err != nil {
				b.Fatal(err)
			}
			runWorkers(b, workers, func(ctx context.Context) (int, error) {
				jobs, err := c.Claim(ctx, batch, 30*time.Second)
				for _, j := range jobs {
					if err := c.Complete(ctx, j); err != nil {
						return 0, err
					}
				}
				return len(jobs), err
			})
		})
		b.Run(fmt.Sprintf("batch=%d/raw", batch), func(b *testing.B) {
			queue := setupBench(b, pool)
			runWorkers(b, workers, func(ctx context.Context) (int, error) {
				rows, err := pool.Query(ctx, rawClaim, batch, "bench", (30 * time.Second).Microseconds(), queue)
				if err != nil {
					return 0, err
				}
				type idf struct{ id, fence int64 }
				var got []idf
				for rows.Next() {
					var r idf
					rows.Scan(&r.id, &r.fence)
					got = append(got, r)
				}
				if err := rows.Err(); err != nil {
					return 0, err
				}
				for _, r := range got {
					tag, err := pool.Exec(ctx, rawComplete, r.id, r.fence)
					if err != nil {
						return 0, err
					}
					if tag.RowsAffected() != 1 {
						return 0, fmt.Errorf("job %d: lease lost", r.id)
					}
				}
				return len(got), nil
			})
		})
	}
	b.Run("pool/workers=8", func(b *testing.B) {
		queue := setupBench(b, pool)
		c, err := claim.New(context.Background(), pool, claim.WithQueue(queue))
		if err != nil {
			b.Fatal(err)
		}
		var done atomic.Int64
		all := make(chan struct{})
		p, err := claim.NewRunner(c, func(context.Context, *claim.Job) error { return nil },
			claim.WithWorkers(workers), claim.WithPollInterval(time.Millisecond),
			claim.WithResultHook(func(_ *claim.Job, r claim.Result) {
				if r.Outcome != claim.Completed {
					b.Errorf("outcome %v: %v", r.Outcome, r.Err)
				}
				if done.Add(1) == int64(b.N) {
					close(all)
				}
			}))
		if err != nil {
			b.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.Background())
		b.ResetTimer()
		start := time.Now()
		runDone := make(chan error, 1)
		go func() { runDone <- p.Run(ctx) }()
		<-all
		b.StopTimer()
		elapsed := time.Since(start)
		stop()
		<-runDone
		b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
	})
}

func setupBench(b *testing.B, pool *pgxpool.Pool) string {
	b.Helper()
	queue := fmt.Sprintf("bench-%d", benchQueue.Add(1))
	for left := b.N; left > 0; left -= 10000 {
		enqueueMany(b, pool, queue, min(left, 10000), 25)
	}
	pool.Exec(context.Background(), `ANALYZE pgfence_jobs`)
	return queue
}

func runWorkers(b *testing.B, workers int, step func(context.Context) (int, error)) {
	b.Helper()
	ctx := context.Background()
	var total atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for {
				n, err := step(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				if n == 0 {
					return
				}
				total.Add(int64(n))
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	elapsed := time.Since(start)
	if total.Load() != int64(b.N) {
		b.Fatalf("handled %d jobs, want %d", total.Load(), b.N)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
}
