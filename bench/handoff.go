package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/pglease"
)

// handoffRow is the hand-off latency of one mode: from the start of the
// holder's Release to the return of the next waiter's Acquire.
type handoffRow struct {
	mode          string
	p50, p90, p99 sample // per round, in ms
	stmts         sample // statements per hand-off, per round
	max           time.Duration
	handoffs      int
	perRoundMs    []float64
}

// runHandoff has W waiters block in Acquire on one key while each holder
// releases at once, with and without WithWakeOnRelease; modes alternate per
// round. The waiters share up to ten clients (as a few processes would),
// all on one pool.
func runHandoff(ctx context.Context, e *env, rep *report) error {
	w := e.opts.waiters
	var sent statements
	pool, err := e.pool(ctx, w+handoffClients(w)+4, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = &sent })
	if err != nil {
		return err
	}
	defer pool.Close()
	modes := []struct {
		name string
		opts []pglease.Option
	}{
		{"polling (default)", nil},
		{"WithWakeOnRelease", []pglease.Option{pglease.WithWakeOnRelease()}},
		{"WithFairWaiting (polling)", []pglease.Option{pglease.WithFairWaiting()}},
		{"WithFairWaiting + WithWakeOnRelease", []pglease.Option{pglease.WithFairWaiting(), pglease.WithWakeOnRelease()}},
	}
	rows := make([]*handoffRow, len(modes))
	for i, m := range modes {
		rows[i] = &handoffRow{mode: m.name}
	}
	for round := range e.opts.rounds {
		for i := range modes {
			mi := (i + round) % len(modes)
			before := sent.n.Load()
			lat, err := handoffRound(ctx, pool, w, fmt.Sprintf("handoff/%d/%d", round, mi), modes[mi].opts)
			n := sent.n.Load() - before
			if err != nil {
				rep.failures++
				return fmt.Errorf("%s: %w", modes[mi].name, err)
			}
			r := rows[mi]
			r.p50 = append(r.p50, float64(lat.quantile(0.5))/1e6)
			r.p90 = append(r.p90, float64(lat.quantile(0.9))/1e6)
			r.p99 = append(r.p99, float64(lat.quantile(0.99))/1e6)
			r.stmts = append(r.stmts, float64(n)/float64(len(lat)))
			r.max = max(r.max, lat.quantile(1))
			r.handoffs += len(lat)
			logf("handoff %s: p50 %s p90 %s max %s over %d", modes[mi].name, ms(lat.quantile(0.5)), ms(lat.quantile(0.9)), ms(lat.quantile(1)), len(lat))
		}
	}
	rep.handoff = rows
	return nil
}

// handoffClients is how many clients the waiters share: each client keeps
// one listening connection with WithWakeOnRelease, and the server's
// max_connections (100 by default) must hold them all.
func handoffClients(waiters int) int { return min(waiters, 10) }

// handoffRound: one holder takes key, w waiters queue in Acquire, and each
// lease is released as soon as it is granted; returns the w hand-off
// latencies.
func handoffRound(ctx context.Context, p *pgxpool.Pool, w int, key string, opts []pglease.Option) (latencies, error) {
	clients := make([]*pglease.Client, handoffClients(w)+1)
	for i := range clients {
		c, err := pglease.New(p, append([]pglease.Option{pglease.WithoutAutoRenew(), pglease.WithOwner(fmt.Sprintf("waiter-%d", i))}, opts...)...)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		clients[i] = c
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	first, err := clients[0].TryAcquire(rctx, key, leaseTTL)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var releasedAt time.Time // start of the latest Release
	var lat latencies
	var firstErr error
	var wg sync.WaitGroup
	for i := 1; i <= w; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := clients[1+(i-1)%(len(clients)-1)].Acquire(rctx, key, leaseTTL)
			got := time.Now()
			mu.Lock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				return
			}
			lat = append(lat, got.Sub(releasedAt))
			releasedAt = time.Now()
			mu.Unlock()
			if err := l.Release(rctx); err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
		}()
	}
	// Let every waiter reach its wait (and the wake-up listeners LISTEN).
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	releasedAt = time.Now()
	mu.Unlock()
	if err := first.Release(rctx); err != nil {
		return nil, err
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return lat, nil
}

// statements counts the statements a pool's connections send (a pgx query
// tracer).
type statements struct{ n atomic.Int64 }

// TraceQueryStart counts one statement.
func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.n.Add(1)
	return ctx
}

// TraceQueryEnd does nothing.
func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
