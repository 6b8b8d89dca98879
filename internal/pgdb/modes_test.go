package pgdb_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/advisory"
	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/lockless"
	"github.com/pgfence/pgfence/pgguard"
	"github.com/pgfence/pgfence/pglease"
)

// The core of every package works whatever DefaultQueryExecMode the caller's
// pool has: pgfence's statements do not depend on it, and values (a job's
// JSON payload) are encoded for the server's types in each.
func TestCoreInEveryQueryExecMode(t *testing.T) {
	modes := []pgx.QueryExecMode{
		pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol,
	}
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			pool := pgtest.Pool(t, func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = mode })
			runCore(t, pool, 1)
		})
	}
}

// Through PgBouncer in transaction pooling mode with pgx's defaults
// (QueryExecModeCacheStatement), several workers at once: leases with
// auto-renew, guarded writes, a claim pool, dedup and advisory locks.
func TestCoreBehindPgBouncer(t *testing.T) {
	pool := pgtest.BouncerPool(t, func(c *pgxpool.Config) { c.MaxConns = 16 })
	if mode := pool.Config().ConnConfig.DefaultQueryExecMode; mode != pgx.QueryExecModeCacheStatement {
		t.Fatalf("pgx's default changed: %v", mode)
	}
	// Four workers, each running the core several times, so that server
	// sessions are shared between clients and statements.
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				runCore(t, pool, w)
			}
		}()
	}
	wg.Wait()
	testPoolBehindBouncer(t, pool)
}

var unique atomic.Int64

func name(prefix string) string {
	return fmt.Sprintf("%s_%d_%d", prefix, time.Now().UnixNano(), unique.Add(1))
}

// runCore runs one pass of each package's main path on pool; it reports
// failures with t.Error so that it may run on several goroutines.
func runCore(t *testing.T, pool *pgxpool.Pool, worker int) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	check := func(what string, err error) bool {
		if err != nil {
			t.Errorf("worker %d: %s: %v", worker, what, err)
			return false
		}
		return true
	}

	// pglease: acquire (auto-renewed), renew, release.
	c, err := pglease.New(pool)
	if !check("pglease.New", err) {
		return
	}
	defer c.Close()
	key := name("lease")
	l, err := c.TryAcquire(ctx, key, 2*time.Second)
	if !check("acquire", err) {
		return
	}
	check("renew", l.Renew(ctx))
	fence := l.Fence()
	check("release", l.Release(ctx))

	// pgguard: a guarded write, and a stale one refused.
	table := name("guarded")
	if _, err := pool.Exec(ctx, "CREATE TABLE "+table+" (id text PRIMARY KEY, v int, last_fence bigint NOT NULL DEFAULT 0)"); !check("create table", err) {
		return
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+table+" (id, v) VALUES ('a', 0)"); !check("insert", err) {
		return
	}
	g, err := pgguard.NewGuard(ctx, pool, pgguard.Table{Name: table, KeyColumn: "id"})
	if check("NewGuard", err) {
		check("guarded update", g.Update(ctx, pool, "a", fence, pgguard.Values{"v": 1}))
		if err := g.Update(ctx, pool, "a", fence-1, pgguard.Values{"v": 2}); !errors.Is(err, pgguard.ErrStaleFence) {
			t.Errorf("worker %d: stale write: want ErrStaleFence, got %v", worker, err)
		}
	}

	// claim: enqueue (JSON payload), claim, complete.
	queue := name("q")
	id, err := enqueueOn(ctx, pool, queue, claim.NewJob{Kind: "k", Payload: json.RawMessage(`{"n": 1}`)})
	if check("enqueue", err) {
		cl, err := claim.New(ctx, pool, claim.WithQueue(queue))
		if check("claim.New", err) {
			jobs, err := cl.Claim(ctx, 1, 10*time.Second)
			if check("claim", err) {
				if len(jobs) != 1 || jobs[0].ID != id {
					t.Errorf("worker %d: claimed %v, want job %d", worker, jobs, id)
				} else {
					check("complete", cl.Complete(ctx, jobs[0]))
				}
			}
		}
	}

	// lockless: a dedup insert, won once and lost once.
	dedup := name("dedup")
	if _, err := pool.Exec(ctx, "CREATE TABLE "+dedup+" (k text PRIMARY KEY, v int)"); check("create dedup table", err) {
		ins, err := lockless.NewInsertOnce(ctx, pool, lockless.InsertOnceSpec{
			Table: lockless.Table{Name: dedup}, Columns: []string{"k", "v"}, ConflictOn: []string{"k"}, Returning: []string{"v"}})
		if check("NewInsertOnce", err) {
			var v int
			won, err := ins.Insert(ctx, pool, []any{"x", 1}, &v)
			if check("dedup insert", err) && !won {
				t.Errorf("worker %d: first insert lost", worker)
			}
			won, err = ins.Insert(ctx, pool, []any{"x", 2}, &v)
			if check("dedup insert again", err) && (won || v != 1) {
				t.Errorf("worker %d: second insert: won %v, v %d", worker, won, v)
			}
		}
	}

	// advisory: TryDo runs the function in the lock's transaction.
	ran := false
	check("advisory.TryDo", advisory.TryDo(ctx, pool, advisory.Int64Key(unique.Add(1)<<20), func(ctx context.Context, tx pgx.Tx) error {
		ran = true
		return nil
	}))
	if !ran {
		t.Errorf("worker %d: TryDo did not run the function", worker)
	}
}

// testPoolBehindBouncer runs a claim.Runner through the bouncer: every job is
// done once.
func testPoolBehindBouncer(t *testing.T, pool *pgxpool.Pool) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	queue := name("poolq")
	const jobs = 40
	cl, err := claim.New(ctx, pool, claim.WithQueue(queue))
	if err != nil {
		t.Fatal(err)
	}
	for i := range jobs {
		if _, err := cl.Enqueue(ctx, pool, claim.NewJob{Kind: "k", Payload: json.RawMessage(fmt.Sprintf(`{"i": %d}`, i))}); err != nil {
			t.Fatal(err)
		}
	}
	var done atomic.Int64
	all := make(chan struct{})
	p, err := claim.NewRunner(cl, func(ctx context.Context, j *claim.Job) error {
		if done.Add(1) == jobs {
			close(all)
		}
		return nil
	}, claim.WithWorkers(4))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- p.Run(runCtx) }()
	select {
	case <-all:
	case <-ctx.Done():
		t.Errorf("claim pool behind the bouncer: %d of %d jobs done", done.Load(), jobs)
	}
	stop()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("pool.Run: %v", err)
	}
	var left int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM pgfence_jobs WHERE queue = $1 AND state <> 'completed'", pgx.QueryExecModeSimpleProtocol, queue).Scan(&left); err != nil || left != 0 {
		t.Errorf("jobs not done: %d (%v)", left, err)
	}
}

// What docs/pgbouncer.md tells users to set for their own queries behind a
// transaction pooler (default_query_exec_mode=cache_describe in the URL):
// their statements inside advisory.TryDo, in several workers, never fail.
func TestREADMESettingBehindPgBouncer(t *testing.T) {
	url := pgtest.BouncerURL(t)
	cfg, err := pgxpool.ParseConfig(url + "&default_query_exec_mode=cache_describe")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ConnConfig.DefaultQueryExecMode != pgx.QueryExecModeCacheDescribe {
		t.Fatalf("the URL parameter was not taken: %v", cfg.ConnConfig.DefaultQueryExecMode)
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	key := advisory.Int64Key(unique.Add(1) << 21)
	var wg sync.WaitGroup
	var ran atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				err := advisory.TryDo(context.Background(), pool, key, func(ctx context.Context, tx pgx.Tx) error {
					var n int64
					ran.Add(1)
					return tx.QueryRow(ctx, "SELECT $1::bigint + 1", int64(i)).Scan(&n)
				})
				if err != nil && !errors.Is(err, pgfence.ErrNotAcquired) {
					t.Errorf("TryDo with the user's own query: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if ran.Load() == 0 {
		t.Fatal("no function ran")
	}
}

// enqueueOn enqueues j on queue of the ready-made jobs table.
func enqueueOn(ctx context.Context, pool *pgxpool.Pool, queue string, j claim.NewJob) (int64, error) {
	c, err := claim.New(ctx, pool, claim.WithQueue(queue))
	if err != nil {
		return 0, err
	}
	return c.Enqueue(ctx, pool, j)
}
