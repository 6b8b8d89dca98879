package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/pglease"
)

// scaleRow is one line of the scale table.
type scaleRow struct {
	what, figure, note string
}

// scaleClients is how many clients (or claiming workers) run while the
// table grows or a sweep/purge runs.
const scaleClients = 8

// sweepBatch is the rows per transaction of the sweeps measured, as
// SweepExpired's and SweepFinished's docs give it, for the report's rows.
const sweepBatch = 1000

func runScale(ctx context.Context, e *env, rep *report) error {
	p, err := e.pool(ctx, jobPoolConns)
	if err != nil {
		return err
	}
	defer p.Close()
	if err := warm(ctx, p, scaleClients+4); err != nil {
		return err
	}
	lc, err := pglease.New(p, pglease.WithoutAutoRenew(), pglease.WithOwner("bench"))
	if err != nil {
		return err
	}
	defer lc.Close()
	big := e.opts.scaleRows
	add := func(r scaleRow) {
		logf("scale: %s: %s %s", r.what, r.figure, r.note)
		rep.scale = append(rep.scale, r)
	}

	// 1. Acquire latency with 10^3 and then 10^6 rows in lock_leases, one
	// client on 1,000 keys whose rows exist (expired): the upsert's update path.
	const small = 1000
	if err := fillLeases(ctx, e, p, 0, small); err != nil {
		return err
	}
	smallLat, err := acquireLatency(ctx, lc, small, e.opts.duration*time.Duration(e.opts.rounds))
	if err != nil {
		return err
	}
	if err := fillLeases(ctx, e, p, small, big); err != nil {
		return err
	}
	bigLat, err := acquireLatency(ctx, lc, small, e.opts.duration*time.Duration(e.opts.rounds))
	if err != nil {
		return err
	}
	ratio := float64(bigLat.quantile(0.5)) / float64(smallLat.quantile(0.5))
	add(scaleRow{fmt.Sprintf("TryAcquire latency, 1 client, %s rows in lock_leases", num(small)),
		fmt.Sprintf("p50 %s, p99 %s", ms(smallLat.quantile(0.5)), ms(smallLat.quantile(0.99))), fmt.Sprintf("%d acquisitions", len(smallLat))})
	add(scaleRow{fmt.Sprintf("TryAcquire latency, 1 client, %s rows in lock_leases", num(float64(big))),
		fmt.Sprintf("p50 %s, p99 %s", ms(bigLat.quantile(0.5)), ms(bigLat.quantile(0.99))),
		fmt.Sprintf("%d acquisitions; p50 %.2f× the small table (target ≤ 1.20×); measured one after the other, not interleaved", len(bigLat), ratio)})
	rep.scaleAcquireRatio = ratio

	// 2. A sweep of the expired rows while 8 clients acquire and release.
	var swept int64
	sweepTime, during, before, err := whileRunning(ctx, scaleClients, func(ctx context.Context, r *rand.Rand) (time.Duration, error) {
		t := time.Now()
		l, err := lc.TryAcquire(ctx, fmt.Sprintf("live/%d", r.IntN(10000)), leaseTTL)
		d := time.Since(t)
		if errors.Is(err, pgfence.ErrNotAcquired) {
			return d, nil
		}
		if err != nil {
			return 0, err
		}
		return d, l.Release(ctx)
	}, func(ctx context.Context) error {
		// Rows expired for more than a minute: the filled ones, not the live
		// keys. In batches of sweepBatch rows.
		swept, err = lc.SweepExpired(ctx, time.Minute)
		return err
	})
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	rep.sweepP99 = during.quantile(0.99)
	add(scaleRow{fmt.Sprintf("SweepExpired of %s expired leases (batches of %s rows, each its own transaction)", num(float64(swept)), num(sweepBatch)),
		fmt.Sprintf("took %s; TryAcquire during it: p50 %s, p99 %s", ms(sweepTime), ms(during.quantile(0.5)), ms(during.quantile(0.99))),
		fmt.Sprintf("%d clients, %d acquisitions during it; p99 before it %s (target p99 ≤ 10 ms)", scaleClients, len(during), ms(before.quantile(0.99)))})

	// 3. Claim rate with 10^6 completed jobs kept in the table, against an
	// empty table, 8 workers.
	w := e.opts.workers[0]
	if err := e.exec(ctx, p, "TRUNCATE pgfence_jobs", "VACUUM ANALYZE pgfence_jobs"); err != nil {
		return err
	}
	if err := insertPgfenceJobs(ctx, p, "scale", e.opts.jobs); err != nil {
		return err
	}
	emptyRate, err := claimRunnerRate(ctx, p, "scale", w, e.opts.jobs)
	if err != nil {
		return err
	}
	if err := e.exec(ctx, p, "TRUNCATE pgfence_jobs"); err != nil {
		return err
	}
	if _, err := p.Exec(ctx, `INSERT INTO pgfence_jobs (queue, kind, state, attempt, fence, finished_at, created_at)
SELECT 'scale', 'noop', 'completed', 1, g, now() - interval '1 hour', now() - interval '1 hour' FROM generate_series(1, $1) g`, big); err != nil {
		return err
	}
	if err := e.exec(ctx, p, "VACUUM ANALYZE pgfence_jobs"); err != nil {
		return err
	}
	if err := insertPgfenceJobs(ctx, p, "scale", e.opts.jobs); err != nil {
		return err
	}
	bigRate, err := claimRunnerRate(ctx, p, "scale", w, e.opts.jobs)
	if err != nil {
		return err
	}
	add(scaleRow{fmt.Sprintf("claim.Runner, %d workers, %s jobs, empty table", w, num(float64(e.opts.jobs))), num(emptyRate) + " jobs/s", ""})
	add(scaleRow{fmt.Sprintf("claim.Runner, %d workers, %s jobs, %s completed jobs kept", w, num(float64(e.opts.jobs)), num(float64(big))), num(bigRate) + " jobs/s",
		fmt.Sprintf("%.2f× the empty table; measured one after the other", bigRate/emptyRate)})

	// 4. A purge of the finished jobs while 8 workers claim and complete.
	cl, err := claim.New(ctx, p, claim.WithQueue("scale"), claim.WithOwner("bench"))
	if err != nil {
		return err
	}
	if err := insertPgfenceJobs(ctx, p, "scale", 4*e.opts.jobs); err != nil {
		return err
	}
	var purged int64
	purgeTime, cDuring, cBefore, err := whileRunning(ctx, scaleClients, func(ctx context.Context, _ *rand.Rand) (time.Duration, error) {
		t := time.Now()
		jobs, err := cl.Claim(ctx, 1, 30*time.Second)
		d := time.Since(t)
		if err != nil {
			return 0, err
		}
		for _, j := range jobs {
			if err := cl.Complete(ctx, j); err != nil {
				return 0, err
			}
		}
		return d, nil
	}, func(ctx context.Context) error {
		// Jobs finished for more than a minute: the filled ones, not those
		// completed during the sweep. In batches of sweepBatch rows.
		purged, err = cl.SweepFinished(ctx, time.Minute)
		return err
	})
	if err != nil {
		return fmt.Errorf("purge: %w", err)
	}
	rep.purgeP99 = cDuring.quantile(0.99)
	add(scaleRow{fmt.Sprintf("claim.SweepFinished of %s finished jobs (batches of %s rows, each its own transaction)", num(float64(purged)), num(sweepBatch)),
		fmt.Sprintf("took %s; Claim during it: p50 %s, p99 %s", ms(purgeTime), ms(cDuring.quantile(0.5)), ms(cDuring.quantile(0.99))),
		fmt.Sprintf("%d workers (Claim 1 + Complete), %d claims during it; p99 before it %s (target p99 ≤ 50 ms)", scaleClients, len(cDuring), ms(cBefore.quantile(0.99)))})
	return e.exec(ctx, p, "TRUNCATE pgfence_jobs, lock_leases")
}

// fillLeases inserts expired lease rows row/from .. row/to-1 (setup: one
// statement, not pgfence's API) and refreshes the statistics.
func fillLeases(ctx context.Context, e *env, p *pgxpool.Pool, from, to int) error {
	t := time.Now()
	if _, err := p.Exec(ctx, `INSERT INTO lock_leases (lock_key, owner, owner_token, fence, acquired_at, expires_at)
SELECT 'row/' || g, 'filler', 'filler', g + 1, now() - interval '2 hours', now() - interval '1 hour'
  FROM generate_series($1::int, $2::int - 1) g`, from, to); err != nil {
		return fmt.Errorf("fill lock_leases: %w", err)
	}
	logf("scale: lock_leases filled to %s rows in %v", num(float64(to)), time.Since(t).Round(time.Millisecond))
	return e.exec(ctx, p, "VACUUM ANALYZE lock_leases")
}

// acquireLatency: one client, TryAcquire + Release on random keys among the
// first n filled rows, for d; returns the TryAcquire latencies.
func acquireLatency(ctx context.Context, lc *pglease.Client, n int, d time.Duration) (latencies, error) {
	var lat latencies
	r := rand.New(rand.NewPCG(1, 2))
	for end := time.Now().Add(d); time.Now().Before(end); {
		t := time.Now()
		l, err := lc.TryAcquire(ctx, fmt.Sprintf("row/%d", r.IntN(n)), leaseTTL)
		if err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t))
		if err := l.Release(ctx); err != nil {
			return nil, err
		}
	}
	return lat, nil
}

// whileRunning runs op from n goroutines, starts bg after a short baseline,
// and stops the goroutines when bg returns. It returns bg's duration and the
// op latencies during bg and before it.
func whileRunning(ctx context.Context, n int, op func(context.Context, *rand.Rand) (time.Duration, error), bg func(context.Context) error) (time.Duration, latencies, latencies, error) {
	var mu sync.Mutex
	var before, during latencies
	var firstErr error
	var bgStart, bgEnd time.Time
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), 7))
			for {
				select {
				case <-stop:
					return
				default:
				}
				t := time.Now()
				d, err := op(ctx, r)
				mu.Lock()
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				switch {
				case bgStart.IsZero() || t.Before(bgStart):
					before = append(before, d)
				case bgEnd.IsZero() || t.Before(bgEnd):
					during = append(during, d)
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(time.Second)
	mu.Lock()
	bgStart = time.Now()
	mu.Unlock()
	err := bg(ctx)
	mu.Lock()
	bgEnd = time.Now()
	mu.Unlock()
	close(stop)
	wg.Wait()
	return bgEnd.Sub(bgStart), during, before, errors.Join(err, firstErr)
}
