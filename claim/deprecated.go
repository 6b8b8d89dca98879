package claim

import (
	"context"
	"time"
)

// The names below are the ones claim had before it took package pglease's
// vocabulary (a lease has a TTL, expires at a time, is renewed) and before
// Pool, which collided with pgxpool.Pool, became Runner. They are kept for
// one release so that code using them keeps compiling; Table.LeaseUntil is
// the one rename without a stand-in (a struct field cannot have one).

// Pool is the old name of Runner.
//
// Deprecated: use Runner.
type Pool = Runner

// PoolOption is the old name of RunnerOption.
//
// Deprecated: use RunnerOption.
type PoolOption = RunnerOption

// NewPool is the old name of NewRunner.
//
// Deprecated: use NewRunner.
func NewPool(c *Claimer, h Handler, opts ...RunnerOption) (*Runner, error) {
	return NewRunner(c, h, opts...)
}

// NewTxPool is the old name of NewTxRunner.
//
// Deprecated: use NewTxRunner.
func NewTxPool(c *Claimer, h TxHandler, opts ...RunnerOption) (*Runner, error) {
	return NewTxRunner(c, h, opts...)
}

// WithLease is the old name of WithTTL.
//
// Deprecated: use WithTTL.
func WithLease(d time.Duration) RunnerOption { return WithTTL(d) }

const (
	// MinLease is the old name of MinTTL.
	//
	// Deprecated: use MinTTL.
	MinLease = MinTTL
	// MaxLease is the old name of MaxTTL.
	//
	// Deprecated: use MaxTTL.
	MaxLease = MaxTTL
)

// Heartbeat is the old name of Renew.
//
// Deprecated: use Renew.
func (c *Claimer) Heartbeat(ctx context.Context, j *Job) error { return c.Renew(ctx, j) }

// Lease is the old name of TTL.
//
// Deprecated: use TTL.
func (j *Job) Lease() time.Duration { return j.TTL() }

// LeaseUntil is the old name of ExpiresAt.
//
// Deprecated: use ExpiresAt.
func (j *Job) LeaseUntil() time.Time { return j.ExpiresAt() }
