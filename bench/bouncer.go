package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/pgdb"
	"github.com/pgfence/pgfence/internal/testsupport/dbenv"
	"github.com/pgfence/pgfence/pglease"
)

// Connection routes of the PgBouncer section, also its columns.
const (
	rDirect      = "direct"
	rDirectDesc  = "direct, cache_describe"
	rBouncer     = "PgBouncer"
	rBouncerDesc = "PgBouncer, cache_describe"
)

// bouncerLeaseOrder and bouncerJobOrder are the routes each workload runs on.
// Lease pairs: pglease runs its own statements unnamed behind a pooler
// whatever the pool's mode, so "direct, cache_describe" shows what that
// mode alone costs. Jobs: claim.Runner pipelines a completion with the next
// claim only where the pool's mode is safe behind the pooler, so the pool's
// mode matters there.
var (
	bouncerLeaseOrder = []string{rDirect, rDirectDesc, rBouncer}
	bouncerJobOrder   = []string{rDirect, rBouncer, rBouncerDesc}
)

// bouncerServerConns is PgBouncer's server pool: every client gets a server
// session, so the section measures the pooler's hop, not a queue for
// sessions.
const bouncerServerConns = 40

// bouncerRow is one line of the PgBouncer table: a workload at a count.
type bouncerRow struct {
	workload string // "lease pairs" or "jobs"
	count    int    // clients or workers
	rates    map[string]sample
	status   map[string]string
	ratio    map[string]sample // route / direct, per round
}

// runBouncer starts a PgBouncer in transaction mode in front of the
// benchmark's server and runs lease pairs and jobs through it and directly,
// alternating; it stops the PgBouncer by its PID at the end.
func runBouncer(ctx context.Context, e *env, rep *report) error {
	b, err := dbenv.StartBouncerPool(ctx, e.adminURL, "transaction", bouncerServerConns, os.Stderr)
	if errors.Is(err, dbenv.ErrNoBouncer) {
		rep.bouncerSkip = err.Error()
		logf("skipping the PgBouncer section: %v", err)
		return nil
	}
	if err != nil {
		return err
	}
	pid := b.PID()
	defer func() {
		b.Close()
		logf("PgBouncer (pid %d) stopped", pid)
	}()
	rep.bouncerVersion = bouncerVersion()
	route := func(viaBouncer, describe bool) func(*pgxpool.Config) {
		return func(cfg *pgxpool.Config) {
			if viaBouncer {
				bc, _ := pgx.ParseConfig(b.URL(cfg.ConnConfig.Database))
				cfg.ConnConfig.Host, cfg.ConnConfig.Port = bc.Host, bc.Port
			}
			// No TLS on any route (the PgBouncer started here has none),
			// and no fallbacks: pgx's fallback for sslmode=prefer would
			// reach the server directly.
			cfg.ConnConfig.TLSConfig, cfg.ConnConfig.Fallbacks = nil, nil
			if describe {
				cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
			}
		}
	}
	if err := bouncerLeases(ctx, e, rep, route); err != nil {
		return err
	}
	return bouncerJobs(ctx, e, rep, route)
}

// routeFunc configures a pool for a route: through the PgBouncer or
// directly, in pgx's default exec mode or cache_describe.
type routeFunc func(viaBouncer, describe bool) func(*pgxpool.Config)

// bouncerLeases: pglease acquire + release pairs on 10,000 keys, one pool
// and one client per route.
func bouncerLeases(ctx context.Context, e *env, rep *report, route routeFunc) error {
	maxC := 0
	for _, c := range e.opts.clients {
		maxC = max(maxC, c)
	}
	routes := map[string]func(*pgxpool.Config){rDirect: route(false, false), rDirectDesc: route(false, true), rBouncer: route(true, false)}
	ops := map[string]lockOp{}
	for _, name := range bouncerLeaseOrder {
		p, err := routePool(ctx, e, name, maxC, routes[name])
		if err != nil {
			return err
		}
		defer p.Close()
		if err := warm(ctx, p, maxC); err != nil {
			return err
		}
		lc, err := pglease.New(p, pglease.WithoutAutoRenew(), pglease.WithOwner("bench"))
		if err != nil {
			return err
		}
		defer lc.Close()
		ops[name] = func(ctx context.Context, key string) (bool, error) {
			l, err := lc.TryAcquire(ctx, key, leaseTTL)
			if errors.Is(err, pgfence.ErrNotAcquired) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			return true, l.Release(ctx)
		}
	}
	keys := e.opts.keys
	keyFn := func(r *rand.Rand) string { return fmt.Sprintf("b/%d", r.IntN(keys)) }
	for _, clients := range e.opts.clients {
		row := newBouncerRow("lease pairs", clients)
		for round := range e.opts.rounds {
			per := map[string]float64{}
			for _, name := range rotated(bouncerLeaseOrder, round) {
				if row.status[name] != "" {
					continue
				}
				r, err := turn(ctx, clients, e.opts.duration, keyFn, ops[name])
				if ctx.Err() != nil {
					return ctx.Err()
				}
				row.record(rep, name, r, err, per)
			}
			row.ratios(per, bouncerLeaseOrder)
		}
		logf("pgbouncer lease pairs, %d clients: direct %s, direct cache_describe %s, PgBouncer %s pairs/s", clients,
			row.rates[rDirect].rate(), row.rates[rDirectDesc].rate(), row.rates[rBouncer].rate())
		rep.bouncer = append(rep.bouncer, row)
	}
	return nil
}

// bouncerJobs: claim.Runner over the same no-op jobs as the jobs section,
// per route.
func bouncerJobs(ctx context.Context, e *env, rep *report, route routeFunc) error {
	routes := map[string]func(*pgxpool.Config){rDirect: route(false, false), rBouncer: route(true, false), rBouncerDesc: route(true, true)}
	pools := map[string]*pgxpool.Pool{}
	for _, name := range bouncerJobOrder {
		// A no-op Handler holds no connection: the runner's claims,
		// renewals and rescues need a few.
		p, err := routePool(ctx, e, name, 8, routes[name])
		if err != nil {
			return err
		}
		defer p.Close()
		pools[name] = p
	}
	admin := pools[rDirect]
	for _, workers := range e.opts.workers {
		row := newBouncerRow("jobs", workers)
		for round := range e.opts.rounds {
			per := map[string]float64{}
			for _, name := range rotated(bouncerJobOrder, round) {
				if row.status[name] != "" {
					continue
				}
				if err := insertPgfenceJobs(ctx, admin, "bouncer", e.opts.jobs); err != nil {
					return err
				}
				r, err := claimRunnerRate(ctx, pools[name], "bouncer", workers, e.opts.jobs)
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if err == nil {
					err = e.exec(ctx, admin, "TRUNCATE pgfence_jobs", "VACUUM ANALYZE pgfence_jobs")
				}
				row.record(rep, name, r, err, per)
			}
			row.ratios(per, bouncerJobOrder)
		}
		logf("pgbouncer jobs, %d workers: direct %s, PgBouncer %s, PgBouncer cache_describe %s jobs/s", workers,
			row.rates[rDirect].rate(), row.rates[rBouncer].rate(), row.rates[rBouncerDesc].rate())
		rep.bouncer = append(rep.bouncer, row)
	}
	return nil
}

// routePool opens a pool for route name and checks that it goes through
// PgBouncer exactly when its name says so.
func routePool(ctx context.Context, e *env, name string, conns int, opt func(*pgxpool.Config)) (*pgxpool.Pool, error) {
	p, err := e.pool(ctx, conns, opt)
	if err != nil {
		return nil, fmt.Errorf("%s pool: %w", name, err)
	}
	c, err := p.Acquire(ctx)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("%s pool: %w", name, err)
	}
	behind, err := pgdb.BehindPooler(ctx, c.Conn())
	c.Release()
	if err == nil && behind != strings.HasPrefix(name, rBouncer) {
		err = fmt.Errorf("goes through a pooler: %v", behind)
	}
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("%s pool: %w", name, err)
	}
	return p, nil
}

func newBouncerRow(workload string, n int) *bouncerRow {
	return &bouncerRow{workload: workload, count: n, rates: map[string]sample{}, status: map[string]string{}, ratio: map[string]sample{}}
}

// record keeps one turn's rate, or its failure.
func (row *bouncerRow) record(rep *report, name string, r float64, err error, per map[string]float64) {
	if err != nil {
		row.status[name] = "failed: " + err.Error()
		rep.failures++
		logf("pgbouncer %s %d, %s: %v", row.workload, row.count, name, err)
		return
	}
	row.rates[name] = append(row.rates[name], r)
	per[name] = r
}

// ratios adds this round's route / direct ratios.
func (row *bouncerRow) ratios(per map[string]float64, order []string) {
	d := per[rDirect]
	for _, name := range order[1:] {
		if r := per[name]; r > 0 && d > 0 {
			row.ratio[name] = append(row.ratio[name], r/d)
		}
	}
}

// bouncerVersion is the first line of pgbouncer --version, if it runs.
func bouncerVersion() string {
	for _, bin := range []string{"/usr/sbin/pgbouncer", "pgbouncer"} {
		if out, err := runQuiet(bin, "--version"); err == nil {
			return firstLine(out)
		}
	}
	return "PgBouncer"
}
