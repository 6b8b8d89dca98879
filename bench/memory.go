package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/pgfence/pgfence/pglease"
)

// memResult: client heap and goroutines per held, auto-renewed lease.
type memResult struct {
	held                              int
	heapBefore, heapAfter             uint64
	goroutinesBefore, goroutinesAfter int
	bytesPerLease                     float64
	goroutinesPerLease                float64
	acquireTime                       time.Duration
}

// runMemory holds N leases at once on one client with auto-renewal on (the
// default) and a 60 s TTL, and compares the heap (runtime.ReadMemStats after
// GC) and the goroutine count before and after. The pool and its
// connections are opened and warmed before the first reading, so they are
// not counted.
func runMemory(ctx context.Context, e *env, rep *report) error {
	const workers = 16
	p, err := e.pool(ctx, workers)
	if err != nil {
		return err
	}
	defer p.Close()
	if err := warm(ctx, p, workers); err != nil {
		return err
	}
	c, err := pglease.New(p, pglease.WithOwner("bench"))
	if err != nil {
		return err
	}
	defer c.Close()
	// One lease taken and released first, so that lazily built state (the
	// prepared statements on each connection, the client's maps) exists.
	for i := range workers {
		l, err := c.TryAcquire(ctx, fmt.Sprintf("warm/%d", i), time.Minute)
		if err != nil {
			return err
		}
		if err := l.Release(ctx); err != nil {
			return err
		}
	}
	n := e.opts.held
	leases := make([]*pglease.Lease, n) // allocated before the first reading
	heap0, g0 := heapAndGoroutines()
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	t := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				l, err := c.TryAcquire(ctx, fmt.Sprintf("held/%d", i), time.Minute)
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				leases[i] = l
			}
		}()
	}
	wg.Wait()
	acquireTime := time.Since(t)
	if firstErr != nil {
		return firstErr
	}
	heap1, g1 := heapAndGoroutines()
	r := &memResult{held: n, heapBefore: heap0, heapAfter: heap1, goroutinesBefore: g0, goroutinesAfter: g1, acquireTime: acquireTime}
	r.bytesPerLease = (float64(heap1) - float64(heap0)) / float64(n)
	r.goroutinesPerLease = float64(g1-g0) / float64(n)
	rep.memory = r
	logf("memory: %d leases: %.0f B heap and %.3f goroutines per lease", n, r.bytesPerLease, r.goroutinesPerLease)
	runtime.KeepAlive(leases)
	return releaseAll(ctx, leases, workers)
}

// releaseAll releases the leases from n goroutines.
func releaseAll(ctx context.Context, leases []*pglease.Lease, n int) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(leases); i += n {
				if err := leases[i].Release(ctx); err != nil && errs[w] == nil {
					errs[w] = err
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func heapAndGoroutines() (uint64, int) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc, runtime.NumGoroutine()
}
