package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/pglease"
)

// coordRow is one line of the coordination table: a kind at a client count.
type coordRow struct {
	clients int
	rates   map[string]sample
}

// Coordination contenders, also the table's column order.
const (
	kMutexHot = "mutex, one key"
	kSem      = "semaphore N=4, one key"
	kShared   = "shared, one key"
	kMutexAny = "mutex, 10,000 keys"
	kSet      = "key set of 2, 10,000 keys"
)

var coordOrder = []string{kMutexHot, kSem, kShared, kMutexAny, kSet}

// runCoord measures acquire + release pairs per second of every kind of
// lease, next to the mutex: try once, release at once, one pool for all.
func runCoord(ctx context.Context, e *env, rep *report) error {
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
	c, err := pglease.New(pool, pglease.WithoutAutoRenew())
	if err != nil {
		return err
	}
	defer c.Close()
	ops, err := coordOps(c)
	if err != nil {
		return err
	}
	for _, clients := range e.opts.clients {
		row := &coordRow{clients: clients, rates: map[string]sample{}}
		for round := range e.opts.rounds {
			for _, name := range rotated(coordOrder, round) {
				rate, err := turn(ctx, clients, e.opts.duration, func(*rand.Rand) string { return "" }, ops[name])
				if err != nil {
					rep.failures++
					return fmt.Errorf("%s at %d clients: %w", name, clients, err)
				}
				row.rates[name] = append(row.rates[name], rate)
				logf("coord %s, %d clients: %.0f pairs/s", name, clients, rate)
			}
		}
		rep.coord = append(rep.coord, row)
	}
	return nil
}

// coordOps are the timed operations: one acquisition (never waiting) and,
// when granted, its release. A refusal is no pair.
func coordOps(c *pglease.Client) (map[string]lockOp, error) {
	one := func(l *pglease.Lease, err error) (bool, error) {
		if errors.Is(err, pgfence.ErrNotAcquired) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return true, l.Release(context.Background())
	}
	anyKey := func() string { return fmt.Sprintf("coord/k/%d", rand.IntN(10000)) }
	return map[string]lockOp{
		kMutexHot: func(ctx context.Context, _ string) (bool, error) {
			return one(c.TryAcquire(ctx, "coord/hot", leaseTTL))
		},
		kSem: func(ctx context.Context, _ string) (bool, error) {
			return one(c.TryAcquire(ctx, "coord/sem", leaseTTL, pglease.Permits(4)))
		},
		kShared: func(ctx context.Context, _ string) (bool, error) {
			return one(c.TryAcquire(ctx, "coord/rw", leaseTTL, pglease.Shared()))
		},
		kMutexAny: func(ctx context.Context, _ string) (bool, error) { return one(c.TryAcquire(ctx, anyKey(), leaseTTL)) },
		kSet: func(ctx context.Context, _ string) (bool, error) {
			a, b := anyKey(), anyKey()
			for a == b {
				b = anyKey()
			}
			s, err := c.TryAcquireSet(ctx, []string{a, b}, leaseTTL)
			if errors.Is(err, pgfence.ErrNotAcquired) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			return true, s.Release(ctx)
		},
	}, nil
}

func (r *report) coordTable(p printer) {
	if len(r.coord) == 0 {
		return
	}
	p("")
	p("## Lease kinds: acquire + release pairs per second")
	p("")
	p("Each client loops: one acquisition that never waits, then its release (`WithoutAutoRenew`, TTL 30 s, one client on one pool); a refusal counts no pair. " +
		"**mutex**: `TryAcquire`. **semaphore N=4**: `TryAcquire(key, ttl, pglease.Permits(4))` (a permit with its own fence; every acquisition of the key is judged under the key's row lock). " +
		"**shared**: `TryAcquire(key, ttl, pglease.Shared())`. **key set of 2**: `TryAcquireSet` of two keys drawn from 10,000, in one statement, all or none. Releases commit asynchronously for every kind.")
	p("")
	p("| clients | %s |", strings.Join(coordOrder, " | "))
	p("|---:|%s", strings.Repeat("---:|", len(coordOrder)))
	for _, row := range r.coord {
		var cells []string
		for _, n := range coordOrder {
			cells = append(cells, row.rates[n].rate())
		}
		p("| %d | %s |", row.clients, strings.Join(cells, " | "))
	}
}
