package claim_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// BenchmarkJobThroughput runs three contenders side by side on the same
// database, alternating over rounds (the contenders' order rotates every
// round), at 8 and 32 workers, each on a fresh queue of pre-inserted jobs
// with a no-op handler:
//
//   - pool: claim.Runner (batched claims, batched durable completions);
//   - txpool: claim.NewTxRunner (one transaction per job, committed with its
//     completion);
//   - onepertx: the common hand-written pattern, one job per transaction:
//     BEGIN; SELECT … FOR UPDATE SKIP LOCKED LIMIT 1; UPDATE; COMMIT
//     (unfenced).
//
// It logs every round and reports the medians (jobs/s) and the ratios of
// the medians. One run of the function is the whole experiment: use
// -benchtime 1x. Jobs per contender and round: PGFENCE_BENCH_JOBS (default
// 20000); rounds: PGFENCE_BENCH_ROUNDS (default 3); PGFENCE_BENCH_ONLY=pool
// (or txpool, onepertx) runs one contender alone, for -cpuprofile. Point it at a server with
// fsync on:
//
//	PGFENCE_DATABASE_URL='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable' \
//	  go test -run '^$' -bench JobThroughput -benchtime 1x -timeout 1h ./claim/
func BenchmarkJobThroughput(b *testing.B) {
	jobs := envInt(b, "PGFENCE_BENCH_JOBS", 20000)
	rounds := envInt(b, "PGFENCE_BENCH_ROUNDS", 3)
	pool := pgtest.Pool(b, func(c *pgxpool.Config) { c.MaxConns = 40 })
	type contender struct {
		name string
		run  func(b *testing.B, pool *pgxpool.Pool, queue string, jobs, workers int)
	}
	contenders := []contender{
		{"pool", runPool(false)},
		{"txpool", runPool(true)},
		{"onepertx", runOnePerTx},
	}
	if only := os.Getenv("PGFENCE_BENCH_ONLY"); only != "" { // for profiling one contender
		contenders = slices.DeleteFunc(contenders, func(c contender) bool { return c.name != only })
	}
	rates := map[string][]float64{}
	for round := range rounds {
		for _, workers := range []int{8, 32} {
			for i := range contenders {
				c := contenders[(i+round)%len(contenders)]
				queue := setupQueue(b, pool, jobs)
				start := time.Now()
				c.run(b, pool, queue, jobs, workers)
				rate := float64(jobs) / time.Since(start).Seconds()
				key := fmt.Sprintf("%s/workers=%d", c.name, workers)
				rates[key] = append(rates[key], rate)
				// Printed, not logged: benchmark logs are cut after ten lines.
				fmt.Printf("round %d  %-20s %7.0f jobs/s\n", round+1, key, rate)
			}
		}
	}
	var table strings.Builder
	for _, workers := range []int{8, 32} {
		med := func(name string) float64 { return median(rates[fmt.Sprintf("%s/workers=%d", name, workers)]) }
		p, tx, one := med("pool"), med("txpool"), med("onepertx")
		fmt.Fprintf(&table, "\nworkers=%d  medians over %d rounds of %d jobs: pool %.0f, txpool %.0f, onepertx %.0f jobs/s; pool/onepertx %.2f×, txpool/pool %.2f×",
			workers, rounds, jobs, p, tx, one, p/one, tx/p)
		b.ReportMetric(p, fmt.Sprintf("pool-w%d-jobs/s", workers))
		b.ReportMetric(tx, fmt.Sprintf("txpool-w%d-jobs/s", workers))
		b.ReportMetric(one, fmt.Sprintf("onepertx-w%d-jobs/s", workers))
	}
	fmt.Println(table.String())
}

func envInt(b *testing.B, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return n
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

func setupQueue(b *testing.B, pool *pgxpool.Pool, n int) string {
	b.Helper()
	queue := fmt.Sprintf("bench-%d", benchQueue.Add(1))
	for left := n; left > 0; left -= 10000 {
		enqueueMany(b, pool, queue, min(left, 10000), 25)
	}
	if _, err := pool.Exec(context.Background(), `ANALYZE pgfence_jobs`); err != nil {
		b.Fatal(err)
	}
	return queue
}

// runPool runs a claim.Runner (or a NewTxRunner one) with a no-op handler until it has
// completed all jobs of the queue; any other outcome fails the benchmark.
func runPool(tx bool) func(b *testing.B, pool *pgxpool.Pool, queue string, jobs, workers int) {
	return func(b *testing.B, pool *pgxpool.Pool, queue string, jobs, workers int) {
		c, err := claim.New(context.Background(), pool, claim.WithQueue(queue))
		if err != nil {
			b.Fatal(err)
		}
		var done atomic.Int64
		all := make(chan struct{})
		opts := []claim.Option{
			claim.WithWorkers(workers), claim.WithPollInterval(time.Millisecond),
			claim.WithResultHook(func(_ *claim.Job, r claim.Result) {
				if r.Outcome != claim.Completed {
					b.Errorf("outcome %v: %v", r.Outcome, r.Err)
				}
				if done.Add(1) == int64(jobs) {
					close(all)
				}
			}),
		}
		var p *claim.Runner
		if tx {
			p, err = claim.NewTxRunner(c, func(context.Context, pgx.Tx, *claim.Job) error { return nil }, opts...)
		} else {
			p, err = claim.NewRunner(c, func(context.Context, *claim.Job) error { return nil }, opts...)
		}
		if err != nil {
			b.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.Background())
		runDone := make(chan error, 1)
		go func() { runDone <- p.Run(ctx) }()
		<-all
		stop()
		if err := <-runDone; err != nil {
			b.Fatal(err)
		}
	}
}

// runOnePerTx is the hand-written pattern: each worker loops over BEGIN,
// take one job FOR UPDATE SKIP LOCKED, mark it completed, COMMIT.
func runOnePerTx(b *testing.B, pool *pgxpool.Pool, queue string, jobs, workers int) {
	ctx := context.Background()
	var total atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				ok, err := onePerTx(ctx, pool, queue)
				if err != nil {
					b.Error(err)
					return
				}
				if !ok {
					return
				}
				total.Add(1)
			}
		})
	}
	wg.Wait()
	if total.Load() != int64(jobs) {
		b.Fatalf("handled %d jobs, want %d", total.Load(), jobs)
	}
}

func onePerTx(ctx context.Context, pool *pgxpool.Pool, queue string) (bool, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx)
	var id int64
	err = tx.QueryRow(ctx, `SELECT id FROM pgfence_jobs
 WHERE queue = $1 AND state = 'available' AND run_at <= now()
 ORDER BY priority, run_at, id
 LIMIT 1
 FOR UPDATE SKIP LOCKED`, queue).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, `UPDATE pgfence_jobs SET state = 'completed', attempt = attempt + 1, finished_at = now() WHERE id = $1`, id); err != nil {
		return false, err
	}
	return true, tx.Commit(ctx)
}
