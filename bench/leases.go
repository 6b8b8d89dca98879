package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"cirello.io/pglock"
	"github.com/bsm/redislock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/pglease"
)

const leaseTTL = 30 * time.Second

// lockOp is one acquire + release attempt on key. acquired is false when the
// key was held (a refusal, not an error).
type lockOp func(ctx context.Context, key string) (acquired bool, err error)

// leaseContender is one way to take a lock; skip says why it cannot run here.
type leaseContender struct {
	name  string
	op    lockOp
	skip  error
	close func()
}

// Contender names, also the table's column order.
const (
	cPgfence  = "pgfence"
	cRaw      = "raw SQL"
	cAdvisory = "advisory xact lock"
	cPglock   = "cirello pglock"
	cRedis    = "redislock"
)

var leaseOrder = []string{cPgfence, cRaw, cAdvisory, cPglock, cRedis}

// seedSchema is a plain lease table, for the raw statements.
const seedSchema = `CREATE TABLE seed_leases (
  lock_key   text        PRIMARY KEY,
  owner      text        NOT NULL,
  fence      bigint      NOT NULL,
  expires_at timestamptz NOT NULL
)`

// The two raw statements, an upsert acquire and an expiring release, bound.
const (
	seedAcquire = `INSERT INTO seed_leases (lock_key, owner, fence, expires_at)
VALUES ($1, $2, 1, now() + $3::bigint * interval '1 microsecond')
ON CONFLICT (lock_key) DO UPDATE
   SET owner      = EXCLUDED.owner,
       fence      = seed_leases.fence + 1,
       expires_at = EXCLUDED.expires_at
 WHERE seed_leases.expires_at <= now()
RETURNING fence`
	seedRelease = `UPDATE seed_leases SET expires_at = now() WHERE lock_key = $1 AND fence = $2`
)

// newLeaseContenders builds every lease contender. The PostgreSQL ones
// share one warmed-up pool of maxClients connections (they take turns, and
// the server's max_connections must hold the pool).
func newLeaseContenders(ctx context.Context, e *env, pool *pgxpool.Pool, maxClients int) ([]*leaseContender, error) {
	var out []*leaseContender

	// pgfence: the public API, no auto-renew (the lease is released at once).
	lc, err := pglease.New(pool, pglease.WithoutAutoRenew(), pglease.WithOwner("bench"))
	if err != nil {
		return nil, err
	}
	out = append(out, &leaseContender{name: cPgfence, close: func() { lc.Close() },
		op: func(ctx context.Context, key string) (bool, error) {
			l, err := lc.TryAcquire(ctx, key, leaseTTL)
			if errors.Is(err, pgfence.ErrNotAcquired) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			return true, l.Release(ctx)
		}})

	// The raw statements, through pgx, on a plain lease table.
	if err := e.exec(ctx, pool, seedSchema); err != nil {
		return nil, err
	}
	out = append(out, &leaseContender{name: cRaw, close: func() {},
		op: func(ctx context.Context, key string) (bool, error) {
			var fence int64
			err := pool.QueryRow(ctx, seedAcquire, key, "bench", leaseTTL.Microseconds()).Scan(&fence)
			if errors.Is(err, pgx.ErrNoRows) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			_, err = pool.Exec(ctx, seedRelease, key, fence)
			return true, err
		}})

	// pg_try_advisory_xact_lock: held until the transaction ends.
	out = append(out, &leaseContender{name: cAdvisory, close: func() {},
		op: func(ctx context.Context, key string) (bool, error) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return false, err
			}
			var got bool
			if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))", key).Scan(&got); err != nil {
				_ = tx.Rollback(ctx)
				return false, err
			}
			return got, tx.Commit(ctx)
		}})

	// cirello.io/pglock: FailIfLocked, no heartbeat. New insists on lib/pq;
	// UnsafeNew takes the same pgx driver as the others, so the comparison is
	// of the statements, not of the drivers.
	// database/sql would keep idle connections checked out of the shared
	// pool and starve the other contenders: with no idle connections each
	// statement takes one from the pool and gives it back, like pgx does.
	db := stdlib.OpenDBFromPool(pool)
	db.SetMaxOpenConns(maxClients)
	db.SetMaxIdleConns(0)
	pl, err := pglock.UnsafeNew(db, pglock.WithLeaseDuration(leaseTTL), pglock.WithHeartbeatFrequency(0), pglock.WithCustomTable("pglock_locks"), pglock.WithOwner("bench"))
	if err != nil {
		return nil, err
	}
	if err := pl.CreateTable(); err != nil {
		return nil, fmt.Errorf("pglock: create table: %w", err)
	}
	out = append(out, &leaseContender{name: cPglock, close: func() { db.Close() },
		op: func(ctx context.Context, key string) (bool, error) {
			l, err := pl.AcquireContext(ctx, key, pglock.FailIfLocked())
			if errors.Is(err, pglock.ErrNotAcquired) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			return true, pl.ReleaseContext(ctx, l)
		}})

	// bsm/redislock on the local Redis, if it answers.
	rc := &leaseContender{name: cRedis, skip: e.redisErr, close: func() {}}
	if e.redisErr == nil {
		rl := redislock.New(e.redis)
		prefix := e.dbName + ":"
		rc.op = func(ctx context.Context, key string) (bool, error) {
			l, err := rl.Obtain(ctx, prefix+key, leaseTTL, nil)
			if errors.Is(err, redislock.ErrNotObtained) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			return true, l.Release(ctx)
		}
	}
	out = append(out, rc)
	return out, nil
}

// turn runs op from clients goroutines for d and returns acquire + release
// pairs per second. Each goroutine draws its keys from keyFn.
func turn(ctx context.Context, clients int, d time.Duration, keyFn func(r *rand.Rand) string, op lockOp) (float64, error) {
	var pairs atomic.Int64
	var firstErr error
	var once sync.Once
	// A turn that overruns by far has hung: fail it rather than wait.
	tctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), uint64(start.UnixNano())))
			for time.Now().Before(deadline) && tctx.Err() == nil {
				ok, err := op(tctx, keyFn(r))
				if err != nil {
					once.Do(func() { firstErr = err; cancel() })
					return
				}
				if ok {
					pairs.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	if err := tctx.Err(); err != nil && time.Since(start) > d {
		return 0, fmt.Errorf("turn overran %v: %w", d, err)
	}
	return float64(pairs.Load()) / time.Since(start).Seconds(), nil
}

// leaseRow is one line of the lease table: a workload at a client count.
type leaseRow struct {
	workload   string
	clients    int
	rates      map[string]sample
	status     map[string]string // "skipped: …" or "failed: …"
	ratioRaw   sample            // pgfence / raw, per round
	ratioPL    sample            // pgfence / pglock, per round
	ratioRedis sample            // pgfence / redislock, per round
}

func runLeases(ctx context.Context, e *env, rep *report) error {
	maxC := 0
	for _, c := range e.opts.clients {
		maxC = max(maxC, c)
	}
	pool, err := e.pool(ctx, maxC)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := warm(ctx, pool, maxC); err != nil {
		return err
	}
	cs, err := newLeaseContenders(ctx, e, pool, maxC)
	if err != nil {
		return err
	}
	defer func() {
		for _, c := range cs {
			c.close()
		}
	}()
	keys := e.opts.keys
	workloads := []struct {
		name  string
		keyFn func(r *rand.Rand) string
	}{
		{fmt.Sprintf("%s keys", num(float64(keys))), func(r *rand.Rand) string { return fmt.Sprintf("k/%d", r.IntN(keys)) }},
		{"one hot key", func(*rand.Rand) string { return "hot" }},
	}
	for _, w := range workloads {
		for _, clients := range e.opts.clients {
			row := &leaseRow{workload: w.name, clients: clients, rates: map[string]sample{}, status: map[string]string{}}
			for round := range e.opts.rounds {
				perRound := map[string]float64{}
				for _, c := range rotated(cs, round) {
					if c.skip != nil {
						row.status[c.name] = "skipped: " + c.skip.Error()
						continue
					}
					if e.opts.contenders != nil && !e.opts.contenders[c.name] {
						row.status[c.name] = "skipped: not in -contenders"
						continue
					}
					if row.status[c.name] != "" {
						continue // failed earlier
					}
					r, err := turn(ctx, clients, e.opts.duration, w.keyFn, c.op)
					if ctx.Err() != nil {
						return ctx.Err()
					}
					if err != nil {
						row.status[c.name] = "failed: " + err.Error()
						rep.failures++
						logf("leases %s %d clients %s: %v", w.name, clients, c.name, err)
						continue
					}
					row.rates[c.name] = append(row.rates[c.name], r)
					perRound[c.name] = r
				}
				if a, b := perRound[cPgfence], perRound[cRaw]; a > 0 && b > 0 {
					row.ratioRaw = append(row.ratioRaw, a/b)
				}
				if a, b := perRound[cPgfence], perRound[cPglock]; a > 0 && b > 0 {
					row.ratioPL = append(row.ratioPL, a/b)
				}
				if a, b := perRound[cPgfence], perRound[cRedis]; a > 0 && b > 0 {
					row.ratioRedis = append(row.ratioRedis, a/b)
				}
			}
			logf("leases %s, %d clients: pgfence %s, raw %s, pglock %s pairs/s", w.name, clients,
				row.rates[cPgfence].rate(), row.rates[cRaw].rate(), row.rates[cPglock].rate())
			rep.leases = append(rep.leases, row)
		}
	}
	return nil
}
