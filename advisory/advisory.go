package advisory

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/pgmode"
	"github.com/pgfence/pgfence/internal/validate"
)

var (
	// ErrNotAcquired: TryDo found the key locked by another transaction and
	// did not run the function.
	ErrNotAcquired = errors.New("advisory: lock is held by another transaction")

	// ErrLockLost: the function ran, but its transaction was not the one
	// that took the key (a connection pooler moved its statements), so
	// nothing was committed and the call failed.
	ErrLockLost = errors.New("advisory: lock not held to the end")

	// ErrInvalidInput: a key, pool or function was refused before anything
	// was sent to the database.
	ErrInvalidInput = validate.ErrInvalidInput
)

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

// Int64 returns the bigint of an Int64Key or StringKey; ok is false for a
// PairKey.
func (k Key) Int64() (id int64, ok bool) { return k.id, !k.pair && k.assigned }

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

// sql is the lock statement (queries/advisory.sql). Besides whether the key
// was granted (always true for the waiting form), it returns the server
// session's pid and the transaction's start time, which together name the
// transaction that holds the key: see session.
func (k Key) sql(try bool) (string, []any) {
	if try {
		return k.form(fencedb.AdvisoryTryXactLockInt64, fencedb.AdvisoryTryXactLockPair), k.args()
	}
	return k.form(fencedb.AdvisoryXactLockInt64, fencedb.AdvisoryXactLockPair), k.args()
}

// form picks the key's form of a statement: each advisory lock function
// takes a bigint or two integers, so queries/advisory.sql writes each
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
// pg_try_advisory_xact_lock and, if it was free, runs fn with the
// transaction, then commits (or rolls back if fn returns an error or panics).
// The lock is released when the transaction ends. When another transaction
// holds key, TryDo returns ErrNotAcquired at once and fn does not run. The
// error is fn's error, or the commit's.
func TryDo(ctx context.Context, pool *pgxpool.Pool, key Key, fn func(ctx context.Context, tx pgx.Tx) error) error {
	if err := check(pool, key, fn); err != nil {
		return err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("advisory: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var got bool
	var held holder
	q, args := key.sql(true)
	// The lock statement goes through pgmode (no named prepared statement),
	// so it works behind a transaction pooler with pgx's default mode.
	if err := pgmode.Wrap(tx).QueryRow(ctx, q, args...).Scan(&got, &held.pid, &held.start); err != nil {
		return fmt.Errorf("advisory: locking %v: %w", key, err)
	}
	if !got {
		return fmt.Errorf("%w: %v", ErrNotAcquired, key)
	}
	return finish(ctx, tx, key, held, fn)
}

// holder names the transaction that took a key: its server session's pid
// and its start time (now()). Transaction-level locks last until that
// transaction ends, so while the same session is in a transaction of the
// same start time, the key is still held.
type holder struct {
	pid   int32
	start time.Time
}

// finish runs fn, checks that the transaction that took key is still the
// one fn's statements ran in, and commits.
//
// Why the check. Behind a transaction pooler (PgBouncer, pool_mode =
// transaction) with pgx's default query exec mode, TryDo and Do were seen to
// run a function while another call's function was inside for the same key
// (reported as 4 of 360 calls; reproduced by TestMutualExclusionBehindBouncer
// before this check: up to 11 of ~100). Every such overlap involved a
// function whose own statement had failed with 42P05 or 26000 (named prepared
// statements that belong to server sessions, which the pooler hands from
// client to client), and the server's log showed two sessions past
// pg_advisory_xact_lock for the same key within a millisecond; the exact
// interleaving inside the pooler was not established. Among calls that
// returned success, no overlap was ever seen. Rather than rely on that, a
// call now returns success only if, after its function, its statements still
// run in the very transaction that took the key (same server pid, same
// transaction start time); otherwise it rolls back and fails with
// ErrLockLost. The cost is one round trip per call.
func finish(ctx context.Context, tx pgx.Tx, key Key, held holder, fn func(context.Context, pgx.Tx) error) error {
	if err := fn(ctx, tx); err != nil {
		return err
	}
	var same bool
	if err := pgmode.Wrap(tx).QueryRow(ctx, fencedb.AdvisoryStillInTransaction,
		held.pid, held.start).Scan(&same); err != nil {
		return fmt.Errorf("advisory: checking %v before commit: %w", key, err)
	}
	if !same {
		return fmt.Errorf("%w: %v: the function's statements did not run in the transaction that took the key "+
			"(a connection pooler moved them); nothing was committed", ErrLockLost, key)
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

	q, args := key.sql(false)
	var held holder
	interrupted, err := interruptible(ctx, conn.Conn().PgConn(), func(waitCtx context.Context) error {
		var granted bool
		return pgmode.Wrap(tx).QueryRow(waitCtx, q, args...).Scan(&granted, &held.pid, &held.start)
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
	return finish(ctx, tx, key, held, fn)
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
