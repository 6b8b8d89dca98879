package advisory

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/fencesql"
	"github.com/pgfence/pgfence/internal/pgdb"
)

// SessionLock is a session-level advisory lock (pg_advisory_lock), held on a
// connection of its own that was taken out of the pool for good, until
// Unlock or until that connection drops.
//
// Prefer TryDo and Do. A session lock is for the rare case where the lock
// must be held longer than any transaction should stay open. Know what it
// costs:
//
//   - It is held by a server session, not by a transaction: no COMMIT or
//     ROLLBACK releases it, and nothing ties it to the work it covers. If the
//     work ends without Unlock, the lock stays until the connection closes.
//   - Behind a transaction-pooling proxy such as PgBouncer (pool_mode =
//     transaction), it is unsafe: each transaction may run on a different
//     server session, so the session that took the lock is not necessarily
//     the one that later unlocks it, the unlock can fail or hit nothing, and
//     another client that the proxy hands that server session to inherits a
//     lock it never asked for. Use it only on a direct connection or a
//     session-pooled one. (Transaction-level locks are safe behind such a
//     proxy, since it keeps a transaction on one server session.)
//   - There is no TTL and no fence. If the connection drops, the server
//     releases the lock at once, possibly while this process still believes
//     it holds it: check Held before acting, and protect writes that matter
//     with a fence or a constraint at the resource.
type SessionLock struct {
	key  Key
	mu   sync.Mutex
	conn *pgx.Conn // nil after Unlock
}

// TryLockSession takes key at session level on a dedicated connection if it
// is free, and returns pgfence.ErrNotAcquired at once if another session or
// transaction holds it. The connection is taken out of pool (it counts
// against the server's connections, not the pool's) until Unlock.
func TryLockSession(ctx context.Context, pool *pgxpool.Pool, key Key) (*SessionLock, error) {
	return lockSession(ctx, pool, key, true)
}

// LockSession is TryLockSession that waits until key is granted or ctx
// ends; the wait is interrupted on the server as Do's is.
func LockSession(ctx context.Context, pool *pgxpool.Pool, key Key) (*SessionLock, error) {
	return lockSession(ctx, pool, key, false)
}

func lockSession(ctx context.Context, pool *pgxpool.Pool, key Key, try bool) (*SessionLock, error) {
	if err := check(pool, key, func(context.Context, pgx.Tx) error { return nil }); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("advisory: waiting for %v: %w", key, context.Cause(ctx))
	}
	pc, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("advisory: acquire a connection: %w", err)
	}
	// Never hand a connection that may hold a session lock back to the pool.
	conn := pc.Hijack()
	closeConn := func() {
		cctx, cancel := context.WithTimeout(context.Background(), cancelGrace)
		conn.Close(cctx)
		cancel()
	}
	q := key.form(fencesql.AdvisoryLockInt64, fencesql.AdvisoryLockPair)
	if try {
		q = key.form(fencesql.AdvisoryTryLockInt64, fencesql.AdvisoryTryLockPair)
	}
	args := key.args()
	var got bool
	interrupted, err := interruptible(ctx, conn.PgConn(), func(waitCtx context.Context) error {
		if try {
			return pgdb.Wrap(conn, "").QueryRow(waitCtx, q, args...).Scan(&got)
		}
		_, err := pgdb.Wrap(conn, "").Exec(waitCtx, q, args...)
		got = true
		return err
	})
	switch {
	case interrupted:
		closeConn() // ends the session: a lock granted meanwhile goes with it
		return nil, fmt.Errorf("advisory: waiting for %v: %w", key, context.Cause(ctx))
	case err != nil:
		closeConn()
		return nil, fmt.Errorf("advisory: locking %v: %w", key, err)
	case !got:
		closeConn()
		return nil, fmt.Errorf("advisory: lock %v is held by another session: %w", key, pgfence.ErrNotAcquired)
	}
	return &SessionLock{key: key, conn: conn}, nil
}

// Held asks the server whether this lock's session still holds the key. It
// reports false, with the error, when the dedicated connection has dropped
// (the server then released the lock), and false after Unlock.
func (s *SessionLock) Held(ctx context.Context) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return false, nil
	}
	classid, objid, sub := s.key.lockTag()
	var held bool
	err := pgdb.Wrap(s.conn, "").QueryRow(ctx, fencesql.AdvisorySessionHolds, classid, objid, sub).Scan(&held)
	if err != nil {
		return false, fmt.Errorf("advisory: checking %v: %w", s.key, err)
	}
	return held, nil
}

// Unlock releases the key and closes the dedicated connection (closing alone
// would release it too). Later calls do nothing.
func (s *SessionLock) Unlock(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return nil
	}
	conn := s.conn
	s.conn = nil
	_, err := pgdb.Wrap(conn, "").Exec(ctx, s.key.form(fencesql.AdvisoryUnlockInt64, fencesql.AdvisoryUnlockPair), s.key.args()...)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelGrace)
	defer cancel()
	conn.Close(cctx)
	if err != nil {
		return fmt.Errorf("advisory: unlocking %v (the connection was closed, which releases it): %w", s.key, err)
	}
	return nil
}
