package pgtest

import (
	"context"
	"maps"
	"sync"

	"github.com/pgfence/pgfence/pgguard"
)

// StaleCount counts the stale writes reported to its Hook (give it to
// pgguard.WithStaleHook, also given to payouts.New), in all and per table. It
// is safe for concurrent use; the zero value is ready.
type StaleCount struct {
	mu      sync.Mutex
	total   uint64
	byTable map[string]uint64
	last    *pgguard.StaleFenceError
}

// Hook counts e.
func (c *StaleCount) Hook(_ context.Context, e *pgguard.StaleFenceError) {
	cp := *e
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total++
	if c.byTable == nil {
		c.byTable = map[string]uint64{}
	}
	c.byTable[e.Table]++
	c.last = &cp
}

// Total is the number of stale writes reported.
func (c *StaleCount) Total() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// ByTable returns a copy of the counts per schema-qualified table.
func (c *StaleCount) ByTable() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.byTable)
}

// Last returns a copy of the last stale write reported, nil if none.
func (c *StaleCount) Last() *pgguard.StaleFenceError {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil {
		return nil
	}
	cp := *c.last
	return &cp
}
