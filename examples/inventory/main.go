package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/examples/story"
	"github.com/pgfence/pgfence/lockless"
)

const schema = `
CREATE TABLE inventory (
  sku      text PRIMARY KEY,
  quantity int  NOT NULL
);
CREATE TABLE orders (
  id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  sku   text NOT NULL,
  buyer text NOT NULL
);
CREATE TABLE accounts (
  account_id text   PRIMARY KEY,
  balance    bigint NOT NULL,
  version    bigint NOT NULL DEFAULT 0
);
INSERT INTO inventory VALUES ('lamp', 1), ('chair', 5);
INSERT INTO accounts VALUES ('acct_1', 1000, 0);
`

func main() {
	story.Main("inventory (conditional update, optimistic version)", run)
}

func run(ctx context.Context, env *story.Env, v *story.Verdict) error {
	if _, err := env.Pool.Exec(ctx, schema); err != nil {
		return err
	}
	stock, err := lockless.NewCounter(ctx, env.Pool, lockless.Table{Name: "inventory"}, "sku", "quantity")
	if err != nil {
		return err
	}
	accounts, err := lockless.NewVersioned(ctx, env.Pool, lockless.Table{Name: "accounts"}, "account_id", "version")
	if err != nil {
		return err
	}
	if err := naive(ctx, env, v, stock); err != nil {
		return err
	}
	if err := conditional(ctx, env, v, stock); err != nil {
		return err
	}
	return optimistic(ctx, env, v, accounts)
}

// naive: read, decide, write — with both reads before either write.
func naive(ctx context.Context, env *story.Env, v *story.Verdict, counter *lockless.Counter) error {
	env.Section("1. read-modify-write: two servers, one lamp in stock")
	var bothRead sync.WaitGroup
	bothRead.Add(2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		who := fmt.Sprintf("server-%d", i+1)
		wg.Go(func() {
			var stock int
			if errs[i] = env.Pool.QueryRow(ctx, `SELECT quantity FROM inventory WHERE sku = 'lamp'`).Scan(&stock); errs[i] != nil {
				bothRead.Done()
				return
			}
			env.Logf(who, "SELECT quantity ... -> %d: available", stock)
			bothRead.Done()
			bothRead.Wait() // the unlucky interleaving: both read before either writes
			if _, errs[i] = env.Pool.Exec(ctx, `UPDATE inventory SET quantity = $1 WHERE sku = 'lamp'`, stock-1); errs[i] != nil {
				return
			}
			_, errs[i] = env.Pool.Exec(ctx, `INSERT INTO orders (sku, buyer) VALUES ('lamp', $1)`, who)
			env.Logf(who, "UPDATE inventory SET quantity = %d; order placed", stock-1)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	sold, stock, err := lampState(ctx, env.Pool)
	if err != nil {
		return err
	}
	env.Note("EXPECTED, the read-modify-write race: %d orders for 1 lamp, stock %d: oversold", sold, stock)
	v.Check(sold == 2 && stock == 0, "read-then-write sold the single lamp twice (%d orders)", sold)

	env.Section("1b. the same interleaving, with the check folded into the write")
	if _, err := env.Pool.Exec(ctx, `UPDATE inventory SET quantity = 1 WHERE sku = 'lamp'; DELETE FROM orders`); err != nil {
		return err
	}
	reserved := 0
	var mu sync.Mutex
	bothRead.Add(2)
	for i := range 2 {
		who := fmt.Sprintf("server-%d", i+1)
		wg.Go(func() {
			bothRead.Done()
			bothRead.Wait()
			ok, err := reserve(ctx, env, counter, "lamp", who)
			if err != nil {
				errs[i] = err
				return
			}
			if ok {
				mu.Lock()
				reserved++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	sold, stock, err = lampState(ctx, env.Pool)
	if err != nil {
		return err
	}
	v.Check(reserved == 1 && sold == 1 && stock == 0, "the conditional update sold the lamp once (%d order, stock %d)", sold, stock)
	return nil
}

// reserve is the conditional update, through lockless.Counter:
//
//	UPDATE inventory SET quantity = quantity - 1 WHERE sku = $1 AND quantity >= 1
//
// one statement checks and decrements; the order goes in the same
// transaction.
func reserve(ctx context.Context, env *story.Env, stock *lockless.Counter, sku, buyer string) (bool, error) {
	tx, err := env.Pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx)
	left, err := stock.Take(ctx, tx, sku, 1)
	if errors.Is(err, lockless.ErrInsufficient) {
		env.Logf(buyer, "take 1 %s -> not enough left: sold out", sku)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO orders (sku, buyer) VALUES ($1, $2)`, sku, buyer); err != nil {
		return false, err
	}
	env.Logf(buyer, "take 1 %s -> reserved, %d left", sku, left)
	return true, tx.Commit(ctx)
}

func lampState(ctx context.Context, pool *pgxpool.Pool) (orders, stock int, err error) {
	err = pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM orders WHERE sku = 'lamp'), quantity FROM inventory WHERE sku = 'lamp'`).Scan(&orders, &stock)
	return orders, stock, err
}

// conditional: twenty buyers, five chairs.
func conditional(ctx context.Context, env *story.Env, v *story.Verdict, counter *lockless.Counter) error {
	env.Section("2. conditional update: twenty buyers race for five chairs")
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		reserved int
		soldOut  int
		firstErr error
	)
	start := make(chan struct{})
	for i := range 20 {
		wg.Go(func() {
			<-start
			ok, err := reserve(ctx, env, counter, "chair", fmt.Sprintf("buyer-%02d", i+1))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				firstErr = err
			case ok:
				reserved++
			default:
				soldOut++
			}
		})
	}
	close(start)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	var orders, stock int
	if err := env.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM orders WHERE sku = 'chair'), quantity FROM inventory WHERE sku = 'chair'`).Scan(&orders, &stock); err != nil {
		return err
	}
	env.Note("read back: %d chair orders, stock %d; %d buyers were told 'sold out'", orders, stock, soldOut)
	v.Check(reserved == 5 && soldOut == 15 && orders == 5 && stock == 0,
		"twenty buyers, five chairs: exactly five orders, stock 0, fifteen sold out (%d, %d, %d)", orders, stock, soldOut)
	return nil
}

// optimistic: ten concurrent deposits on a versioned row.
// Each teller reads balance and version, then writes through
// lockless.Versioned:
//
//	UPDATE accounts SET balance = $new, version = version + 1
//	 WHERE account_id = $1 AND version = $read
//
// and on a conflict reads again and decides again.
func optimistic(ctx context.Context, env *story.Env, v *story.Verdict, accounts *lockless.Versioned) error {
	env.Section("3. optimistic concurrency: ten deposits of 10 on acct_1 (balance 1000), at once")
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		conflicts int
		firstErr  error
	)
	var allRead sync.WaitGroup
	allRead.Add(10)
	for i := range 10 {
		who := fmt.Sprintf("teller-%02d", i+1)
		wg.Go(func() {
			first := true
			for attempt := 1; ; attempt++ {
				var balance, version int64
				err := env.Pool.QueryRow(ctx, `SELECT balance, version FROM accounts WHERE account_id = 'acct_1'`).Scan(&balance, &version)
				if first {
					// All ten read the same version before anyone writes:
					// nine of them must lose the first round.
					allRead.Done()
					allRead.Wait()
					first = false
				}
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				_, err = accounts.Update(ctx, env.Pool, "acct_1", version, map[string]any{"balance": balance + 10})
				if err == nil {
					env.Logf(who, "balance %d -> %d at version %d (attempt %d)", balance, balance+10, version, attempt)
					return
				}
				var conflict *lockless.ConflictError
				if !errors.As(err, &conflict) {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				if attempt == 1 {
					env.Logf(who, "version %d is gone (the row is at %d): someone wrote first; re-read and retry", version, conflict.Current)
				}
				mu.Lock()
				conflicts++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	var balance, version int64
	if err := env.Pool.QueryRow(ctx, `SELECT balance, version FROM accounts WHERE account_id = 'acct_1'`).Scan(&balance, &version); err != nil {
		return err
	}
	env.Note("read back: balance %d, version %d; %d write(s) found their version gone and retried", balance, version, conflicts)
	v.Check(balance == 1100 && version == 10 && conflicts >= 9,
		"ten concurrent deposits, no lost update: balance 1100 at version 10, after %d conflicts detected and retried", conflicts)
	return nil
}
