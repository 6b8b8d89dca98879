package advisory_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/advisory"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

type doFunc func(context.Context, *pgxpool.Pool, advisory.Key, func(context.Context, pgx.Tx) error) error

var forms = []struct {
	name string
	do   doFunc
}{{"TryDo", advisory.TryDo}, {"Do", advisory.Do}}

// PostgreSQL releases a transaction's locks as soon as one of its statements
// fails, before the ROLLBACK that ends it. The key must stay held while fn
// goes on after such a failure: a second connection trying the key from
// inside fn, after the failed statement, is refused; fn's error comes back
// unchanged, and its writes are rolled back.
func TestKeyHeldAfterAFailedStatement(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	table := fmt.Sprintf("held_%d", time.Now().UnixNano())
	if _, err := pool.Exec(ctx, `CREATE TABLE `+table+` (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	failing := map[string]string{
		"division by zero": `SELECT 1/0`,
		"unique violation": `INSERT INTO ` + table + ` VALUES (1), (1)`,
	}
	for _, form := range forms {
		for what, stmt := range failing {
			t.Run(form.name+"/"+what, func(t *testing.T) {
				k := key(t, t.Name())
				var stmtErr error
				refused := false
				err := form.do(ctx, pool, k, func(ctx context.Context, tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, `INSERT INTO `+table+` VALUES (2)`); err != nil {
						return err
					}
					_, stmtErr = tx.Exec(ctx, stmt)
					if stmtErr == nil {
						return errors.New("the failing statement succeeded")
					}
					refused = !tryFrom(t, pool, k)
					return stmtErr
				})
				if err != stmtErr {
					t.Fatalf("got %v, want fn's error unchanged (%v)", err, stmtErr)
				}
				if !refused {
					t.Fatal("another connection took the key while fn was still running after a failed statement")
				}
				var n int
				pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n)
				if n != 0 || !tryFrom(t, pool, k) {
					t.Fatalf("after fn: %d rows left, or key still held", n)
				}
			})
		}
	}
}

// fn's own Commit and Rollback end the savepoint it runs in, never the
// transaction that holds the key: the key stays held until fn returns, and
// the tx is closed to fn afterwards.
func TestFunctionCommitAndRollbackKeepTheKey(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	table := fmt.Sprintf("ends_%d", time.Now().UnixNano())
	if _, err := pool.Exec(ctx, `CREATE TABLE `+table+` (what text)`); err != nil {
		t.Fatal(err)
	}
	ends := map[string]func(pgx.Tx) error{
		"Commit":   func(tx pgx.Tx) error { return tx.Commit(ctx) },
		"Rollback": func(tx pgx.Tx) error { return tx.Rollback(ctx) },
	}
	want := map[string]int{"Commit": 1, "Rollback": 0}
	for _, form := range forms {
		for name, end := range ends {
			t.Run(form.name+"/"+name, func(t *testing.T) {
				pool.Exec(ctx, `TRUNCATE `+table)
				k := key(t, t.Name())
				err := form.do(ctx, pool, k, func(ctx context.Context, tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, `INSERT INTO `+table+` VALUES ('x')`); err != nil {
						return err
					}
					if err := end(tx); err != nil {
						return err
					}
					if tryFrom(t, pool, k) {
						return errors.New("the key was released by fn's " + name)
					}
					if _, err := tx.Exec(ctx, `SELECT 1`); !errors.Is(err, pgx.ErrTxClosed) {
						return fmt.Errorf("statement after %s: %v, want pgx.ErrTxClosed", name, err)
					}
					if err := tx.Rollback(ctx); !errors.Is(err, pgx.ErrTxClosed) {
						return fmt.Errorf("second end: %v, want pgx.ErrTxClosed", err)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				var n int
				pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n)
				if n != want[name] {
					t.Fatalf("%d rows after fn's %s, want %d", n, name, want[name])
				}
			})
		}
	}
}

// A function that swallows a failed statement's error and returns nil
// commits nothing, and the call says why.
func TestSwallowedFailureCommitsNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	table := fmt.Sprintf("swallow_%d", time.Now().UnixNano())
	if _, err := pool.Exec(ctx, `CREATE TABLE `+table+` (what text)`); err != nil {
		t.Fatal(err)
	}
	err := advisory.TryDo(ctx, pool, key(t, table), func(ctx context.Context, tx pgx.Tx) error {
		tx.Exec(ctx, `INSERT INTO `+table+` VALUES ('x')`)
		tx.Exec(ctx, `SELECT 1/0`)
		return nil
	})
	if err == nil {
		t.Fatal("a call whose function swallowed a failed statement reported success")
	}
	var n int
	pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n)
	if n != 0 {
		t.Fatalf("%d rows committed", n)
	}
}

// 8 goroutines × 40 calls on one key, alternating TryDo and Do; each fn
// runs a statement that fails, then keeps working for 3 ms before it returns
// the error. No entry to fn may overlap another, whatever the call returned.
func TestNoOverlapWhenFunctionsFail(t *testing.T) {
	t.Parallel()
	t.Run("direct", func(t *testing.T) {
		t.Parallel()
		countOverlaps(t, pgtest.Pool(t, func(c *pgxpool.Config) { c.MaxConns = 8 }), `SELECT 1/0`)
	})
	t.Run("behind PgBouncer", func(t *testing.T) {
		t.Parallel()
		// pgx's defaults: named prepared statements, which a transaction
		// pooler mixes up between clients, unless fn's statements go out
		// unnamed.
		pool := pgtest.BouncerPool(t, func(c *pgxpool.Config) { c.MaxConns = 8 })
		countOverlaps(t, pool, `SELECT $1::bigint / 0`)
	})
}

func countOverlaps(t *testing.T, pool *pgxpool.Pool, failing string) {
	k := advisory.Int64Key(time.Now().UnixNano())
	var inside, overlaps, entries, otherErrs atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 40 {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				do := forms[(g+i)%2].do
				err := do(ctx, pool, k, func(ctx context.Context, tx pgx.Tx) error {
					entries.Add(1)
					if inside.Add(1) > 1 {
						overlaps.Add(1)
					}
					defer inside.Add(-1)
					var n int64
					// A statement of fn's own, in the pool's default mode.
					if err := tx.QueryRow(ctx, `SELECT $1::bigint + 1`, int64(i)).Scan(&n); err != nil {
						otherErrs.Add(1)
						return err
					}
					_, err := tx.Exec(ctx, failing, int64(i))
					time.Sleep(3 * time.Millisecond)
					if err == nil {
						return errors.New("the failing statement succeeded")
					}
					return err
				})
				cancel()
				if err == nil {
					t.Error("a call whose function failed reported success")
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d entries to fn, %d overlaps, %d of fn's own statements failed for another reason", entries.Load(), overlaps.Load(), otherErrs.Load())
	if overlaps.Load() != 0 {
		t.Fatalf("%d of %d entries to fn overlapped another", overlaps.Load(), entries.Load())
	}
	if otherErrs.Load() != 0 {
		t.Fatalf("%d of fn's own statements failed (a pooler mixing up prepared statements?)", otherErrs.Load())
	}
	if entries.Load() == 0 {
		t.Fatal("fn never ran")
	}
}
