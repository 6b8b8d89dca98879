package pgdb

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Pooling is what lies between a client connection and PostgreSQL, as far
// as session state (LISTEN, session-level advisory locks, SET) goes.
type Pooling int

const (
	// PoolingNone: no pooler; the connection is a server session.
	PoolingNone Pooling = iota
	// PoolingSession: a pooler that keeps one server session for the
	// client connection as long as it lasts (PgBouncer's pool_mode =
	// session). Session state works.
	PoolingSession
	// PoolingTransaction: a pooler that lends a server session for one
	// transaction (or statement) at a time (PgBouncer's pool_mode =
	// transaction or statement). Session state stays behind on a server
	// session that other clients use next.
	PoolingTransaction
)

func (p Pooling) String() string {
	switch p {
	case PoolingNone:
		return "none"
	case PoolingSession:
		return "session"
	case PoolingTransaction:
		return "transaction"
	}
	return fmt.Sprintf("Pooling(%d)", int(p))
}

// pinRounds is how many times DetectPooling looks for a server session
// serving two clients, or one client served by two sessions, before it
// takes the sessions to be pinned to their clients.
const pinRounds = 8

// DetectPooling tells what lies between conn and PostgreSQL; pool (the
// pool conn came from, or any other on the same pooler) lends it a second
// client connection to look with, behind a pooler only.
//
// Without a pooler (BehindPooler) the answer is PoolingNone. Behind one, it
// reads the server session's pid on conn and on the second connection in
// turn, pinRounds times. A session pooler gives each client connection one
// server session for its life: the pids never change, and the two differ.
// A transaction pooler hands the session conn has just given back to the
// next client that asks (PgBouncer reuses the most recently released server
// connection first), and serves each statement from whichever session is
// free: one pid seen on both connections, or a connection seen on two,
// is PoolingTransaction for certain. Only a transaction pooler so busy that
// in every round each connection got its own session back, and never the
// other's, would pass for a session pooler. No statement leaves state on a
// server session.
func DetectPooling(ctx context.Context, conn *pgx.Conn, pool interface {
	Acquire(context.Context) (*pgxpool.Conn, error)
}) (Pooling, error) {
	pid, err := serverPID(ctx, conn)
	if err != nil {
		return 0, err
	}
	if pid == conn.PgConn().PID() { // BehindPooler's test
		return PoolingNone, nil
	}
	other, err := pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer other.Release()
	var otherPID uint32
	for round := range pinRounds {
		o, err := serverPID(ctx, other.Conn())
		if err != nil {
			return 0, err
		}
		again, err := serverPID(ctx, conn)
		if err != nil {
			return 0, err
		}
		if o == pid || again != pid || (round > 0 && o != otherPID) {
			return PoolingTransaction, nil
		}
		otherPID = o
	}
	return PoolingSession, nil
}

// serverPID is the pid of the server session that runs conn's statement,
// asked in the simple protocol (nothing prepared, whatever conn's mode).
func serverPID(ctx context.Context, conn *pgx.Conn) (uint32, error) {
	var pid uint32
	err := conn.QueryRow(ctx, "SELECT pg_backend_pid()", pgx.QueryExecModeSimpleProtocol).Scan(&pid)
	return pid, err
}
