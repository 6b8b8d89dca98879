package pgdb

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Mode is the query exec mode of every statement pgfence sends through Wrap.
// It must not depend on server-session state (no named prepared
// statements), so that it is safe behind a transaction pooler.
const Mode = pgx.QueryExecModeCacheDescribe

// BehindPooler tells whether conn reaches PostgreSQL through a connection
// pooler: PgBouncer answers the start-up with a backend key of its own, so
// the pid the connection announced is not the server's pg_backend_pid().
func BehindPooler(ctx context.Context, conn *pgx.Conn) (bool, error) {
	pid, err := serverPID(ctx, conn)
	if err != nil {
		return false, err
	}
	return pid != conn.PgConn().PID(), nil
}

// PipelineSafe tells whether a pgx.Batch sent on pool is safe: pgx sends a
// batch in the pool's default mode (a batch takes no per-call mode), and
// the modes that prepare named statements break behind a transaction
// pooler. It asks the server only when the mode is one of those.
func PipelineSafe(ctx context.Context, pool interface {
	Acquire(context.Context) (*pgxpool.Conn, error)
}, mode pgx.QueryExecMode) (bool, error) {
	switch mode {
	case pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol:
		return true, nil
	}
	c, err := pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer c.Release()
	behind, err := BehindPooler(ctx, c.Conn())
	return !behind, err
}

// Auto picks, once per pool, how pgfence's statements run on it: in the
// pool's own default mode when the pool reaches PostgreSQL directly (named
// prepared statements are then safe, and they halve the cost of a short
// statement: each unnamed one is parsed and planned again, see WrapOwnMode),
// in Mode (Wrap) when a pooler is in between. Until the first check
// succeeds, statements go in Mode, which is safe everywhere.
type Auto struct {
	pool  *pgxpool.Pool
	state atomic.Int32  // autoUnknown, autoDirect or autoPooled
	check chan struct{} // a token: one check at a time, waited for within each caller's ctx
}

const (
	autoUnknown int32 = iota
	autoDirect
	autoPooled
)

// NewAuto returns the chooser for pool.
func NewAuto(pool *pgxpool.Pool) *Auto { return &Auto{pool: pool, check: make(chan struct{}, 1)} }

// Direct tells whether statements may run in the pool's own mode, checking
// the pool once (bounded by ctx) the first time it is asked.
func (a *Auto) Direct(ctx context.Context) bool {
	switch a.state.Load() {
	case autoDirect:
		return true
	case autoPooled:
		return false
	}
	select {
	case a.check <- struct{}{}:
		defer func() { <-a.check }()
	case <-ctx.Done():
		return false // the caller's statement fails on its own ctx, in the safe mode
	}
	if s := a.state.Load(); s != autoUnknown {
		return s == autoDirect
	}
	c, err := a.pool.Acquire(ctx)
	if err != nil {
		return false // ask again next time
	}
	defer c.Release()
	behind, err := BehindPooler(ctx, c.Conn())
	if err != nil {
		return false
	}
	if behind {
		a.state.Store(autoPooled)
		return false
	}
	a.state.Store(autoDirect)
	return true
}
