package lockless_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/lockless"
)

// The examples' tables, created by the tests (they are the caller's tables,
// not pgfence's).
const schema = `
CREATE TABLE IF NOT EXISTS invoices (
  invoice_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  customer_id    bigint NOT NULL,
  billing_period date   NOT NULL,
  status         text   NOT NULL DEFAULT 'DRAFT',
  created_by     int    NOT NULL,
  UNIQUE (customer_id, billing_period)
);
CREATE TABLE IF NOT EXISTS inventory (
  sku      text PRIMARY KEY,
  quantity integer NOT NULL      -- deliberately no CHECK (quantity >= 0): the statement must hold it
);
CREATE TABLE IF NOT EXISTS accounts (
  account_id bigint PRIMARY KEY,
  balance    bigint NOT NULL,
  note       text,
  version    integer NOT NULL DEFAULT 0
);`

func setup(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.Pool(t, func(c *pgxpool.Config) { c.MaxConns = 40 })
	if _, err := pool.Exec(context.Background(), schema); err != nil {
		t.Fatal(err)
	}
	return pool
}

func TestDedupExactlyOneWinner(t *testing.T) {
	ctx := context.Background()
	pool := setup(t)
	ins, err := lockless.NewInsertOnce(ctx, pool, lockless.InsertOnceSpec{
		Table:      lockless.Table{Name: "invoices"},
		Columns:    []string{"customer_id", "billing_period", "created_by"},
		ConflictOn: []string{"customer_id", "billing_period"},
		Returning:  []string{"invoice_id", "created_by"},
	})
	if err != nil {
		t.Fatal(err)
	}
	period := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	pool.Exec(ctx, `DELETE FROM invoices WHERE customer_id = 72`)
	const callers = 32
	var wins atomic.Int32
	ids := make([]int64, callers)
	creators := make([]int32, callers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			<-start
			won, err := ins.Insert(ctx, pool, []any{72, period, i}, &ids[i], &creators[i])
			if err != nil {
				t.Error(err)
				return
			}
			if won {
				wins.Add(1)
				if creators[i] != int32(i) {
					t.Errorf("winner %d got creator %d", i, creators[i])
				}
			}
		})
	}
	close(start)
	wg.Wait()
	var rows int
	pool.QueryRow(ctx, `SELECT count(*) FROM invoices WHERE customer_id = 72`).Scan(&rows)
	if wins.Load() != 1 || rows != 1 {
		t.Fatalf("%d winners, %d invoices; want exactly one of each", wins.Load(), rows)
	}
	for i := range callers {
		if ids[i] != ids[0] || creators[i] != creators[0] {
			t.Fatalf("caller %d learned invoice %d by %d, caller 0 learned %d by %d", i, ids[i], creators[i], ids[0], creators[0])
		}
	}
	// Another period is another invoice.
	if won, err := ins.Insert(ctx, pool, []any{72, period.AddDate(0, 1, 0), 99}, new(int64), new(int32)); err != nil || !won {
		t.Fatalf("next period: %v %v", won, err)
	}
}

func TestInventoryNeverOversold(t *testing.T) {
	ctx := context.Background()
	pool := setup(t)
	pool.Exec(ctx, `INSERT INTO inventory VALUES ('sku-1', 10) ON CONFLICT (sku) DO UPDATE SET quantity = 10`)
	stock, err := lockless.NewCounter(ctx, pool, lockless.Table{Name: "inventory"}, "sku", "quantity")
	if err != nil {
		t.Fatal(err)
	}
	const buyers = 100
	var sold, soldOut atomic.Int32
	var minSeen atomic.Int64
	minSeen.Store(10)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range buyers {
		wg.Go(func() {
			<-start
			left, err := stock.Take(ctx, pool, "sku-1", 1)
			switch {
			case err == nil:
				sold.Add(1)
				for {
					m := minSeen.Load()
					if left >= m || minSeen.CompareAndSwap(m, left) {
						break
					}
				}
			case errors.Is(err, lockless.ErrInsufficient):
				soldOut.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	var q int
	pool.QueryRow(ctx, `SELECT quantity FROM inventory WHERE sku = 'sku-1'`).Scan(&q)
	if sold.Load() != 10 || soldOut.Load() != buyers-10 || q != 0 || minSeen.Load() < 0 {
		t.Fatalf("sold %d, sold out %d, quantity %d, lowest seen %d", sold.Load(), soldOut.Load(), q, minSeen.Load())
	}
	if _, err := stock.Take(ctx, pool, "no-such-sku", 1); !errors.Is(err, pgfence.ErrNotFound) {
		t.Fatalf("unknown sku: %v", err)
	}
	pool.Exec(ctx, `UPDATE inventory SET quantity = 3 WHERE sku = 'sku-1'`)
	if _, err := stock.Take(ctx, pool, "sku-1", 4); !errors.Is(err, lockless.ErrInsufficient) {
		t.Fatalf("taking 4 of 3: %v", err)
	}
	if left, err := stock.Take(ctx, pool, "sku-1", 3); err != nil || left != 0 {
		t.Fatalf("taking 3 of 3: %d %v", left, err)
	}
}

func TestOptimisticConcurrency(t *testing.T) {
	ctx := context.Background()
	pool := setup(t)
	pool.Exec(ctx, `INSERT INTO accounts (account_id, balance) VALUES (1, 0)
		ON CONFLICT (account_id) DO UPDATE SET balance = 0, version = 0, note = NULL`)
	acct, err := lockless.NewVersioned(ctx, pool, lockless.Table{Name: "accounts"}, "account_id", "version")
	if err != nil {
		t.Fatal(err)
	}
	var ver int64 // the row's version after the writers
	pgtest.Step(t, "16 writers by read-modify-write lose no update", func(t *testing.T) {
		// 16 writers each add 1 ten times by read-modify-write, retrying on
		// conflict: no update is lost.
		const writers, adds = 16, 10
		var conflicts atomic.Int32
		var wg sync.WaitGroup
		for range writers {
			wg.Go(func() {
				for range adds {
					for {
						var bal, ver int64
						if err := pool.QueryRow(ctx, `SELECT balance, version FROM accounts WHERE account_id = 1`).Scan(&bal, &ver); err != nil {
							t.Error(err)
							return
						}
						_, err := acct.Update(ctx, pool, 1, ver, map[string]any{"balance": bal + 1})
						if err == nil {
							break
						}
						var ce *lockless.ConflictError
						if !errors.As(err, &ce) || ce.Current <= ver {
							t.Error(err)
							return
						}
						conflicts.Add(1)
					}
				}
			})
		}
		wg.Wait()
		var bal int64
		pool.QueryRow(ctx, `SELECT balance, version FROM accounts WHERE account_id = 1`).Scan(&bal, &ver)
		if bal != writers*adds || ver != writers*adds {
			t.Fatalf("balance %d version %d, want %d each", bal, ver, writers*adds)
		}
		t.Logf("%d conflicts detected and retried", conflicts.Load())
	})

	pgtest.Step(t, "a stale version is refused, a fresh one accepted", func(t *testing.T) {
		// A stale version is refused with the current one, and nothing changes.
		_, err := acct.Update(ctx, pool, 1, 3, map[string]any{"balance": -1, "note": "stale"})
		var ce *lockless.ConflictError
		if !errors.Is(err, pgfence.ErrConflict) || !errors.As(err, &ce) || ce.Expected != 3 || ce.Current != ver {
			t.Fatalf("stale update: %v", err)
		}
		if v, err := acct.Update(ctx, pool, 1, ver, map[string]any{"note": "fresh"}); err != nil || v != ver+1 {
			t.Fatalf("fresh update: %d %v", v, err)
		}
		if _, err := acct.Update(ctx, pool, 2, 0, map[string]any{"note": "x"}); !errors.As(err, &ce) || ce.Current != -1 {
			t.Fatalf("missing row: %v", err)
		}
	})
}

func TestBadIdentifiersAndInput(t *testing.T) {
	ctx := context.Background()
	pool := setup(t)
	inv := lockless.Table{Name: "invoices"}
	specs := map[string]lockless.InsertOnceSpec{
		"injection table":  {Table: lockless.Table{Name: "invoices; DROP TABLE invoices"}, Columns: []string{"customer_id"}, ConflictOn: []string{"customer_id"}},
		"quote in column":  {Table: inv, Columns: []string{`customer_id") VALUES (1); --`}, ConflictOn: []string{"customer_id"}},
		"NUL":              {Table: inv, Columns: []string{"customer\x00_id"}, ConflictOn: []string{"customer_id"}},
		"too long":         {Table: inv, Columns: []string{strings.Repeat("c", 64)}, ConflictOn: []string{"customer_id"}},
		"empty":            {Table: inv, Columns: []string{""}, ConflictOn: []string{"customer_id"}},
		"missing column":   {Table: inv, Columns: []string{"nope"}, ConflictOn: []string{"nope"}},
		"conflict not set": {Table: inv, Columns: []string{"customer_id"}, ConflictOn: []string{"billing_period"}},
		"no columns":       {Table: inv},
		"bad schema":       {Table: lockless.Table{Schema: "pg_catalog\n", Name: "invoices"}, Columns: []string{"customer_id"}, ConflictOn: []string{"customer_id"}},
	}
	for name, spec := range specs {
		if _, err := lockless.NewInsertOnce(ctx, pool, spec); !errors.Is(err, pgfence.ErrInvalidInput) {
			t.Errorf("%s: %v", name, err)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	if _, err := lockless.NewCounter(ctx, pool, lockless.Table{Name: "inventory"}, "sku", "sku"); !errors.Is(err, pgfence.ErrInvalidInput) {
		t.Errorf("text quantity: %v", err)
	}
	stock, _ := lockless.NewCounter(ctx, pool, lockless.Table{Name: "inventory"}, "sku", "quantity")
	for _, n := range []int64{0, -5} {
		if _, err := stock.Take(ctx, pool, "x", n); !errors.Is(err, pgfence.ErrInvalidInput) {
			t.Errorf("take %d: %v", n, err)
		}
	}
	acct, _ := lockless.NewVersioned(ctx, pool, lockless.Table{Name: "accounts"}, "account_id", "version")
	for name, set := range map[string]map[string]any{
		"nothing":   {},
		"version":   {"version": 99},
		"key":       {"account_id": 5},
		"unknown":   {"nope": 1},
		"injection": {"balance = 0, version": 1},
	} {
		if _, err := acct.Update(ctx, pool, 1, 0, set); !errors.Is(err, pgfence.ErrInvalidInput) {
			t.Errorf("set %s: %v", name, err)
		}
	}
	var exists bool
	pool.QueryRow(ctx, `SELECT to_regclass('invoices') IS NOT NULL`).Scan(&exists)
	if !exists {
		t.Fatal("invoices is gone")
	}
}
