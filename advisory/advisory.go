package advisory

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/fencesql"
	"github.com/pgfence/pgfence/internal/pgdb"
	"github.com/pgfence/pgfence/internal/validate"
)

var ()

func invalid(format string, args ...any) error { return validate.Invalid("advisory", format, args...) }

// Key is an advisory lock key in one of PostgreSQL's two key spaces. The zero
// Key is invalid.
type Key struct {
	pair     bool
	id       int64
	ns, obj  int32
	name     string // for messages: the string a StringKey came from
	assigned bool
}

// Int64Key is the bigint key k, as pg_advisory_xact_lock(k) takes it.
func Int64Key(k int64) Key { return Key{id: k, assigned: true} }

// PairKey is the two-integer key (namespace, id), as
// pg_advisory_xact_lock(namespace, id) takes it. It never collides with an
// Int64Key: PostgreSQL keeps the two key spaces apart.
func PairKey(namespace, id int32) Key { return Key{pair: true, ns: namespace, obj: id, assigned: true} }

// StringKey maps s to a bigint key: the first 8 bytes of SHA-256(s),
// big-endian, as a signed int64. s must be 1 to 512 bytes of valid UTF-8
// without NUL bytes.
//
// SHA-256 rather than PostgreSQL's hashtext: it is specified and stable
// (hashtext's output has changed between major versions), computed without a
// round trip, uniform for similar keys, and computable in SQL ([KeySQL]), so
// psql scripts and other languages take the very same lock. Two distinct
// strings share a key with probability 2^-64; among n keys in use the chance
// of any collision is about n²/2^65 (3e-8 for a million keys). A collision
// never weakens mutual exclusion: two unrelated keys wait for each other.
func StringKey(s string) (Key, error) {
	if err := validate.Key(s); err != nil {
		return Key{}, invalid("%v", err)
	}
	sum := sha256.Sum256([]byte(s))
	return Key{id: int64(binary.BigEndian.Uint64(sum[:8])), name: s, assigned: true}, nil
}

// KeySQL is a SQL expression that computes StringKey's bigint from the text
// parameter $1, so that SQL scripts take the same lock:
//
//	SELECT pg_advisory_xact_lock(('x' || left(encode(sha256(convert_to($1, 'UTF8')), 'hex'), 16))::bit(64)::bigint);
const KeySQL = `('x' || left(encode(sha256(convert_to($1::text, 'UTF8')), 'hex'), 16))::bit(64)::bigint`

// String describes the key for messages.
func (k Key) String() string {
	switch {
	case !k.assigned:
		return "advisory key (zero)"
	case k.pair:
		return fmt.Sprintf("advisory key (%d, %d)", k.ns, k.obj)
	case k.name != "":
		return fmt.Sprintf("advisory key %q (%d)", k.name, k.id)
	}
	return fmt.Sprintf("advisory key %d", k.id)
}

// sql is the lock statement (queries/internal/advisory.sql). Besides whether the key
// was granted (always true for the waiting form), it returns the server
// session's pid.
func (k Key) sql(try bool) (string, []any) {
	if try {
		return k.form(fencesql.AdvisoryTryXactLockInt64, fencesql.AdvisoryTryXactLockPair), k.args()
	}
	return k.form(fencesql.AdvisoryXactLockInt64, fencesql.AdvisoryXactLockPair), k.args()
}

// form picks the key's form of a statement: each advisory lock function
// takes a bigint or two integers, so queries/internal/advisory.sql writes each
// statement twice, *Int64 and *Pair.
func (k Key) form(int64Form, pairForm string) string {
	if k.pair {
		return pairForm
	}
	return int64Form
}

func (k Key) args() []any {
	if k.pair {
		return []any{k.ns, k.obj}
	}
	return []any{k.id}
}

// lockTag is how pg_locks shows the key: a bigint key as its high and low 32
// bits with objsubid 1, a pair as its two integers with objsubid 2.
func (k Key) lockTag() (classid, objid int64, objsubid int16) {
	if k.pair {
		return int64(uint32(k.ns)), int64(uint32(k.obj)), 2
	}
	return int64(uint64(k.id) >> 32), int64(uint32(k.id)), 1
}

func check(pool *pgxpool.Pool, key Key, fn func(context.Context, pgx.Tx) error) error {
	switch {
	case pool == nil:
		return invalid("nil pool")
	case !key.assigned:
		return invalid("zero key: make one with StringKey, Int64Key or PairKey")
	case fn == nil:
		return invalid("nil function")
	}
	return nil
}

// TryDo begins a transaction on pool, takes key with
// pg_try_advisory_xact_lock and, if it was free, runs fn inside a savepoint
// of that transaction, then commits (or rolls back if fn returns an error or
// panics). The key is held until the transaction ends, which is after fn
// has returned: a statement of fn's that fails aborts only the savepoint, so
// the key stays held while fn goes on. When another transaction holds key,
// TryDo returns pgfence.ErrNotAcquired at once and fn does not run. The error is
// fn's error, unchanged, or the commit's.
//
// fn's tx is the lock's transaction seen through its savepoint: tx.Commit
// releases the savepoint and tx.Rollback rolls back to it (fn's writes are
// undone); neither ends the transaction or releases the key, and tx is
// closed to fn afterwards. Behind a connection pooler, fn's Exec, Query and
// QueryRow go out as unnamed statements (pgx's cache_describe mode), since
// the pool's default mode may rely on named prepared statements that a
// transaction pooler mixes up between clients.
func TryDo(ctx context.Context, pool *pgxpool.Pool, key Key, fn func(ctx context.Context, tx pgx.Tx) error) error {
	if err := check(pool, key, fn); err != nil {
		return err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("advisory: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	got, pid, err := lock(ctx, tx.Conn().PgConn(), key, true)
	if err != nil {
		return fmt.Errorf("advisory: locking %v: %w", key, err)
	}
	if !got {
		return fmt.Errorf("advisory: lock %v is held by another transaction: %w", key, pgfence.ErrNotAcquired)
	}
	return finish(ctx, tx, key, pid, fn)
}

// lock sends the lock statement and the savepoint fn runs in, pipelined in
// one round trip as unnamed statements (safe behind a transaction pooler,
// whatever the pool's exec mode). got is whether the key was granted; pid is
// the server session's.
func lock(ctx context.Context, conn *pgconn.PgConn, key Key, try bool) (got bool, pid uint32, err error) {
	q, args := key.sql(try)
	params := make([][]byte, len(args))
	for i, a := range args {
		params[i] = fmt.Append(nil, a) // an integer, in text format
	}
	var b pgconn.Batch
	b.ExecParams(q, params, nil, nil, nil)
	b.ExecParams(fencesql.AdvisoryFunctionSavepoint, nil, nil, nil, nil)
	res, err := conn.ExecBatch(ctx, &b).ReadAll()
	if err != nil {
		return false, 0, err
	}
	if len(res) != 2 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 2 {
		return false, 0, fmt.Errorf("unexpected answer to the lock statement")
	}
	row := res[0].Rows[0]
	p, err := strconv.ParseUint(string(row[1]), 10, 32)
	if err != nil {
		return false, 0, fmt.Errorf("reading the server pid: %w", err)
	}
	return string(row[0]) == "t", uint32(p), nil
}

// finish runs fn in the savepoint that lock set and commits. pid is the
// server session's pid as the lock statement saw it: when it is not the pid
// the connection announced at start-up, a pooler is in between, and fn's
// statements go out in pgdb.Mode.
func finish(ctx context.Context, tx pgx.Tx, key Key, pid uint32, fn func(context.Context, pgx.Tx) error) error {
	var view pgx.Tx = tx
	if pid != tx.Conn().PgConn().PID() {
		view = modeTx{tx}
	}
	if err := fn(ctx, &fnTx{Tx: view}); err != nil {
		return err
	}
	if tx.Conn().PgConn().TxStatus() == 'E' {
		return fmt.Errorf("advisory: %v: a statement of the function failed but the function returned nil; nothing was committed", key)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("advisory: commit: %w", err)
	}
	return nil
}

// cancelGrace is how long Do waits for the server to act on a cancel request
// before it closes the connection.
const cancelGrace = 3 * time.Second

// Do is TryDo that waits: it blocks in pg_advisory_xact_lock until key is
// granted or ctx ends. Then it returns an error that wraps ctx's cause
// (errors.Is(err, context.DeadlineExceeded) or context.Canceled), fn does
// not run, and the server has stopped waiting: Do interrupts the wait with a
// cancel request rather than leaving the server's backend queued for the
// lock. Give ctx a deadline: a caller that waits forever has turned a
// coordination fault into an outage.
func Do(ctx context.Context, pool *pgxpool.Pool, key Key, fn func(ctx context.Context, tx pgx.Tx) error) error {
	if err := check(pool, key, fn); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("advisory: waiting for %v: %w", key, context.Cause(ctx))
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("advisory: acquire a connection: %w", err)
	}
	discard := false
	defer func() {
		if discard {
			// Closing the socket ends the session: its transaction aborts
			// and the lock, if it was granted, is released.
			c := conn.Hijack()
			cctx, cancel := context.WithTimeout(context.Background(), cancelGrace)
			c.Close(cctx)
			cancel()
			return
		}
		conn.Release()
	}()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("advisory: begin: %w", err)
	}
	defer func() {
		if !discard {
			tx.Rollback(context.WithoutCancel(ctx))
		}
	}()

	var pid uint32
	interrupted, err := interruptible(ctx, conn.Conn().PgConn(), func(waitCtx context.Context) error {
		var err error
		_, pid, err = lock(waitCtx, conn.Conn().PgConn(), key, false)
		return err
	})
	if interrupted {
		// A cancel request was sent: whatever the statement's outcome, the
		// caller gave up, and a late cancel could hit a later statement on
		// this connection. Drop it.
		discard = true
		return fmt.Errorf("advisory: waiting for %v: %w", key, context.Cause(ctx))
	}
	if err != nil {
		return fmt.Errorf("advisory: locking %v: %w", key, err)
	}
	return finish(ctx, tx, key, pid, fn)
}

// interruptible runs wait, a statement that may block on a lock, on a
// context that ctx does not cancel (pgx's reaction to a cancelled context
// depends on the connection's configuration; a backend waiting for a lock
// ignores a closed socket). When ctx ends first, it sends the server a cancel
// request, which ends the wait at once, and only if that has no effect within
// cancelGrace does it cancel wait's context. interrupted reports that a
// cancel request was sent: the connection must then be discarded.
func interruptible(ctx context.Context, pgConn *pgconn.PgConn, wait func(ctx context.Context) error) (interrupted bool, err error) {
	waitCtx, stopWait := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWait()
	execDone := make(chan struct{})
	afterDone := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(afterDone)
		cctx, cancel := context.WithTimeout(context.Background(), cancelGrace)
		pgConn.CancelRequest(cctx)
		cancel()
		t := time.NewTimer(cancelGrace)
		defer t.Stop()
		select {
		case <-execDone:
		case <-t.C:
			stopWait()
		}
	})
	err = wait(waitCtx)
	close(execDone)
	if !stop() {
		<-afterDone
		return true, err
	}
	return false, err
}

// modeTx is a transaction whose Exec, Query and QueryRow go out in
// pgdb.Mode (unnamed statements), for a function's statements behind a
// pooler. A mode the caller passes as its first argument still wins: pgx
// takes the last of the leading modes.
type modeTx struct{ pgx.Tx }

func (t modeTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return pgdb.Wrap(t.Tx, "").Exec(ctx, sql, args...)
}

func (t modeTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return pgdb.Wrap(t.Tx, "").Query(ctx, sql, args...)
}

func (t modeTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return pgdb.Wrap(t.Tx, "").QueryRow(ctx, sql, args...)
}

func (t modeTx) Begin(ctx context.Context) (pgx.Tx, error) {
	nested, err := t.Tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return modeTx{nested}, nil
}

// fnTx is the transaction a function under the lock sees: the lock's
// transaction inside the savepoint that lock set. Its Commit and Rollback
// end the savepoint, never the transaction that holds the key; after either,
// it is closed to the function (pgx.ErrTxClosed), as a pgx transaction is.
type fnTx struct {
	pgx.Tx
	closed bool
}

func (t *fnTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.closed {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	return t.Tx.Exec(ctx, sql, args...)
}

func (t *fnTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.closed {
		return nil, pgx.ErrTxClosed
	}
	return t.Tx.Query(ctx, sql, args...)
}

func (t *fnTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.closed {
		return errRow{pgx.ErrTxClosed}
	}
	return t.Tx.QueryRow(ctx, sql, args...)
}

func (t *fnTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if t.closed {
		return nil, pgx.ErrTxClosed
	}
	return t.Tx.Begin(ctx)
}

func (t *fnTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, rows pgx.CopyFromSource) (int64, error) {
	if t.closed {
		return 0, pgx.ErrTxClosed
	}
	return t.Tx.CopyFrom(ctx, table, columns, rows)
}

// Commit releases the savepoint: the function's writes become part of the
// lock's transaction, which commits after the function returns.
func (t *fnTx) Commit(ctx context.Context) error { return t.end(ctx, fencesql.AdvisoryFunctionRelease) }

// Rollback undoes the function's writes back to the savepoint; the key stays
// held until the function returns.
func (t *fnTx) Rollback(ctx context.Context) error {
	return t.end(ctx, fencesql.AdvisoryFunctionRollback)
}

func (t *fnTx) end(ctx context.Context, sql string) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	t.closed = true
	_, err := t.Tx.Exec(ctx, sql) // no arguments: the simple protocol, safe behind a pooler
	return err
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
