package lockless_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/lockless"
)

// createExampleTables creates the examples' invoices, inventory and
// accounts tables, if missing, in your database.
func createExampleTables(ctx context.Context, pool *pgxpool.Pool) {
	if _, err := pool.Exec(ctx, schema+`DELETE FROM invoices WHERE customer_id = 1001;`); err != nil {
		log.Fatal(err)
	}
}

// Three billing instances notice that a customer's invoice is due. Only one
// creates it; the others learn which invoice exists and skip sending.
func ExampleInsertOnce() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	createExampleTables(ctx, pool)
	invoices, err := lockless.NewInsertOnce(ctx, pool, lockless.InsertOnceSpec{
		Table:      lockless.Table{Name: "invoices"},
		Columns:    []string{"customer_id", "billing_period", "created_by"},
		ConflictOn: []string{"customer_id", "billing_period"},
		Returning:  []string{"created_by"},
	})
	if err != nil {
		log.Fatal(err)
	}
	period := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for instance := 1; instance <= 3; instance++ {
		var creator int
		won, err := invoices.Insert(ctx, pool, []any{1001, period, instance}, &creator)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("instance %d: created=%v (invoice made by instance %d)\n", instance, won, creator)
	}
	// Output:
	// instance 1: created=true (invoice made by instance 1)
	// instance 2: created=false (invoice made by instance 1)
	// instance 3: created=false (invoice made by instance 1)
}

// Reserve stock with the check and the decrement in one statement.
func ExampleCounter() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	createExampleTables(ctx, pool)
	if _, err := pool.Exec(ctx, `INSERT INTO inventory VALUES ('lamp', 2) ON CONFLICT (sku) DO UPDATE SET quantity = 2`); err != nil {
		log.Fatal(err)
	}
	stock, err := lockless.NewCounter(ctx, pool, lockless.Table{Name: "inventory"}, "sku", "quantity")
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		left, err := stock.Take(ctx, pool, "lamp", 1)
		if errors.Is(err, lockless.ErrInsufficient) {
			fmt.Println("sold out")
			continue
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("reserved one;", left, "left")
	}
	// Output:
	// reserved one; 1 left
	// reserved one; 0 left
	// sold out
}

// Read, decide, write back: the write only counts if nobody wrote since.
func ExampleVersioned() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	createExampleTables(ctx, pool)
	if _, err := pool.Exec(ctx, `INSERT INTO accounts (account_id, balance, version) VALUES (500, 100, 0)
		ON CONFLICT (account_id) DO UPDATE SET balance = 100, version = 0`); err != nil {
		log.Fatal(err)
	}
	accounts, err := lockless.NewVersioned(ctx, pool, lockless.Table{Name: "accounts"}, "account_id", "version")
	if err != nil {
		log.Fatal(err)
	}
	v, err := accounts.Update(ctx, pool, 500, 0, map[string]any{"balance": 150})
	fmt.Println("first writer: version", v, "err", err)

	// A second writer that also read version 0 is refused.
	_, err = accounts.Update(ctx, pool, 500, 0, map[string]any{"balance": 70})
	var conflict *lockless.ConflictError
	if errors.As(err, &conflict) {
		fmt.Println("second writer: conflict, the row is at version", conflict.Current)
	}
	// Output:
	// first writer: version 1 err <nil>
	// second writer: conflict, the row is at version 1
}
