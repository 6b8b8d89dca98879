package interop

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/pgerr"
	"github.com/pgfence/pgfence/pglease"
)

func goClient(t *testing.T, pool *pgxpool.Pool, opts ...pglease.Option) *pglease.Client {
	t.Helper()
	c, err := pglease.New(pool, append([]pglease.Option{pglease.WithOwner("go"), pglease.WithoutAutoRenew()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// From psql, in separate sessions as separate scripts would be: a fence;
// no row while held; a Go client refused; renew with the holder's fence
// one row, with another none; release one row; the next grant a larger
// fence.
func TestContractFromPsql(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := database(t)
	c := goClient(t, pool)
	f1, err := strconv.ParseInt(psql(t, url, `SELECT fence FROM pgfence_acquire('k', '30 s', 'a');`), 10, 64)
	if err != nil || f1 <= 0 {
		t.Fatalf("acquire from psql: fence %d (%v)", f1, err)
	}
	if out := psql(t, url, `SELECT fence FROM pgfence_acquire('k', '30 s', 'b');`); out != "" {
		t.Fatalf("second acquire while held returned %q, want no row", out)
	}
	if _, err := c.TryAcquire(ctx, "k", 30*time.Second); !errors.Is(err, pgfence.ErrNotAcquired) {
		t.Fatalf("Go TryAcquire while psql holds the key: %v, want ErrNotAcquired", err)
	}
	if h, ok, err := c.Holder(ctx, "k"); err != nil || !ok || !h.Held || h.Owner != "a" || h.Fence != f1 {
		t.Fatalf("Go sees holder %+v ok=%v err=%v, want a with fence %d", h, ok, err, f1)
	}
	f := strconv.FormatInt(f1, 10)
	if out := psql(t, url, `SELECT count(*) FROM pgfence_renew('k', `+f+`, '30 s');`); out != "1" {
		t.Fatalf("renew with the holder's fence: %q rows, want 1", out)
	}
	if out := psql(t, url, `SELECT count(*) FROM pgfence_renew('k', `+f+` + 1, '30 s');`); out != "0" {
		t.Fatalf("renew with another fence: %q rows, want 0", out)
	}
	if out := psql(t, url, `SELECT released FROM pgfence_release('k', `+f+`);`); out != "t" {
		t.Fatalf("release: %q, want one row", out)
	}
	if out := psql(t, url, `SELECT count(*) FROM pgfence_release('k', `+f+`);`); out != "0" {
		t.Fatalf("second release: %q rows, want 0", out)
	}
	f2, err := strconv.ParseInt(psql(t, url, `SELECT fence FROM pgfence_acquire('k', '30 s', 'a');`), 10, 64)
	if err != nil || f2 <= f1 {
		t.Fatalf("next acquire: fence %d after %d (%v), want larger", f2, f1, err)
	}
}

// The functions and pglease act on one row with one meaning: each sees,
// renews and releases the other's grant exactly as its own; expiry is the
// database's now() plus the TTL; an expired lease is never renewed or
// released; a release with an old fence leaves a newer holder alone.
func TestContractMatchesGo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := database(t)
	c := goClient(t, pool)
	var (
		fence     int64
		expiresAt time.Time
		n         int
	)

	l, err := c.TryAcquire(ctx, "shared", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pgfence_acquire('shared', '1 min', 'sql')`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("SQL acquire while Go holds: %d rows (%v), want 0", n, err)
	}
	if err := pool.QueryRow(ctx, `SELECT expires_at FROM pgfence_renew('shared', $1, '2 min')`, l.Fence()).Scan(&expiresAt); err != nil {
		t.Fatalf("SQL renew of Go's grant with its fence: %v", err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pgfence_release('shared', $1)`, l.Fence()).Scan(&n); err != nil || n != 1 {
		t.Fatalf("SQL release of Go's grant: %d rows (%v), want 1", n, err)
	}
	if err := l.Renew(ctx); !errors.Is(err, pgfence.ErrLeaseLost) {
		t.Fatalf("Go renew after the SQL release: %v, want ErrLeaseLost", err)
	}

	// A SQL grant: expires_at = now() + TTL by the database clock, to the microsecond.
	var exact bool
	if err := pool.QueryRow(ctx, `SELECT fence, expires_at FROM pgfence_acquire('sql-first', '1.5 s', 'sql')`).Scan(&fence, &expiresAt); err != nil {
		t.Fatalf("SQL acquire: %v", err)
	}
	err = pool.QueryRow(ctx, `SELECT expires_at = $1 AND expires_at - acquired_at = interval '1.5 s' FROM lock_leases WHERE lock_key = 'sql-first'`, expiresAt).Scan(&exact)
	if err != nil || !exact {
		t.Fatalf("SQL acquire: expires_at = acquired_at + TTL: %v (%v)", exact, err)
	}
	if _, err := c.TryAcquire(ctx, "sql-first", time.Minute); !errors.Is(err, pgfence.ErrNotAcquired) {
		t.Fatalf("Go acquire while SQL holds: %v, want ErrNotAcquired", err)
	}
	// Expired by the database clock: renew and release find nothing, Go takes it with a higher fence.
	if _, err := pool.Exec(ctx, `SELECT pg_sleep(extract(epoch FROM $1::timestamptz - now()) + 0.05)`, expiresAt); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`SELECT count(*) FROM pgfence_renew('sql-first', $1, '1 min')`, `SELECT count(*) FROM pgfence_release('sql-first', $1)`} {
		if err := pool.QueryRow(ctx, q, fence).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%s on an expired lease: %d rows (%v), want 0: it must never resurrect", q, n, err)
		}
	}
	g, err := c.TryAcquire(ctx, "sql-first", time.Minute)
	if err != nil || g.Fence() <= fence {
		t.Fatalf("Go acquire after the SQL lease expired: %v, fence %d after %d", err, g.Fence(), fence)
	}
	// The old SQL fence touches nothing of the newer Go holder.
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pgfence_release('sql-first', $1)`, fence).Scan(&n); err != nil || n != 0 {
		t.Fatalf("release with an old fence: %d rows (%v)", n, err)
	}
	if err := g.Renew(ctx); err != nil {
		t.Fatalf("the newer Go holder after an old fence's release: %v", err)
	}
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Acquire and renew commit durably whatever the session says; release
// commits asynchronously: the setting a function makes with
// set_config(..., true) lasts to the end of the calling transaction, which
// reads it when it commits.
func TestContractCommitModes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := database(t)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	setting := func(tx pgx.Tx) string {
		var s string
		if err := tx.QueryRow(ctx, "SHOW synchronous_commit").Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if _, err := conn.Exec(ctx, "SET synchronous_commit = off"); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, "RESET synchronous_commit")
	var fence int64
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT fence FROM pgfence_acquire('durable', '1 min', 'sql')`).Scan(&fence); err != nil {
			return err
		}
		if s := setting(tx); s != "on" {
			t.Errorf("after acquire under synchronous_commit=off the transaction commits with %q, want on", s)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SET synchronous_commit = on"); err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM pgfence_renew('durable', $1, '1 min')`, fence).Scan(&n); err != nil || n != 1 {
			t.Errorf("renew: %d rows, %v", n, err)
		}
		if s := setting(tx); s != "on" {
			t.Errorf("after renew: %q, want on", s)
		}
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM pgfence_release('durable', $1)`, fence).Scan(&n); err != nil || n != 1 {
			t.Errorf("release: %d rows, %v", n, err)
		}
		if s := setting(tx); s != "off" {
			t.Errorf("after release the transaction commits with %q, want off (asynchronous)", s)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Bad input is refused with SQLSTATE PF005 naming the function and the
// argument, before anything is read or written: no lease row, no fence
// drawn, and a bad TTL for a key that has no row is refused too (the check
// is not per row). NUL bytes never reach the functions (22021). A call in a
// transaction older than its statement is refused with PF006.
func TestContractBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := database(t)
	long := strings.Repeat("k", 513)
	for _, tc := range []struct {
		sql  string
		args []any
		code string
		want string
	}{
		{`SELECT * FROM pgfence_acquire($1, '1 min', 'o')`, []any{""}, pgerr.InvalidLeaseArg, "pgfence_acquire: the key is empty"},
		{`SELECT * FROM pgfence_acquire($1, '1 min', 'o')`, []any{nil}, pgerr.InvalidLeaseArg, "the key is empty"},
		{`SELECT * FROM pgfence_acquire($1, '1 min', 'o')`, []any{long}, pgerr.InvalidLeaseArg, "the key is 513 bytes"},
		{`SELECT * FROM pgfence_acquire($1, '1 min', 'o')`, []any{"a\x00b"}, "22021", ""},
		{`SELECT * FROM pgfence_acquire('k', $1::interval, 'o')`, []any{"0 s"}, pgerr.InvalidLeaseArg, "the TTL 00:00:00 is outside"},
		{`SELECT * FROM pgfence_acquire('k', $1::interval, 'o')`, []any{"-5 s"}, pgerr.InvalidLeaseArg, "the TTL"},
		{`SELECT * FROM pgfence_acquire('k', $1::interval, 'o')`, []any{nil}, pgerr.InvalidLeaseArg, "the TTL NULL"},
		{`SELECT * FROM pgfence_acquire('k', $1::interval, 'o')`, []any{"25 hours"}, pgerr.InvalidLeaseArg, "the TTL"},
		{`SELECT * FROM pgfence_acquire('k', '1 min', $1)`, []any{""}, pgerr.InvalidLeaseArg, "the owner label"},
		{`SELECT * FROM pgfence_renew('nobody', 1, $1::interval)`, []any{"0 s"}, pgerr.InvalidLeaseArg, "pgfence_renew: the TTL"},
		{`SELECT * FROM pgfence_renew('nobody', $1, '1 min')`, []any{int64(0)}, pgerr.InvalidLeaseArg, "the fence must be positive"},
		{`SELECT * FROM pgfence_release('nobody', $1)`, []any{int64(-1)}, pgerr.InvalidLeaseArg, "pgfence_release: the fence must be positive"},
		{`SELECT * FROM pgfence_release($1, 1)`, []any{""}, pgerr.InvalidLeaseArg, "pgfence_release: the key is empty"},
	} {
		_, err := pool.Exec(ctx, tc.sql, tc.args...)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != tc.code || !strings.Contains(pe.Message, tc.want) {
			t.Errorf("%s %q: %v, want SQLSTATE %s with %q", tc.sql, tc.args, err, tc.code, tc.want)
		}
	}
	var rows int
	var drawn bool
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM lock_leases), (SELECT is_called FROM pgfence_fence_seq)`).Scan(&rows, &drawn); err != nil {
		t.Fatal(err)
	}
	if rows != 0 || drawn {
		t.Fatalf("refused calls left %d lease rows; a fence drawn: %v", rows, drawn)
	}

	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_sleep(1.1)`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT * FROM pgfence_acquire('k', '1 min', 'o')`)
		return err
	})
	if pgerr.Code(err) != pgerr.StaleTransaction {
		t.Fatalf("acquire in a transaction 1.1 s old: %v, want SQLSTATE %s", err, pgerr.StaleTransaction)
	}
}
