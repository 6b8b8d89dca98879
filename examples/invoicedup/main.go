package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfence/pgfence/examples/story"
	"github.com/pgfence/pgfence/lockless"
)

const schema = `
CREATE TABLE invoices (
  invoice_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  customer_id    bigint NOT NULL,
  billing_period date   NOT NULL,
  status         text   NOT NULL DEFAULT 'DRAFT',
  created_by     text   NOT NULL,
  UNIQUE (customer_id, billing_period)
);
`

const period = "2026-11-01"

var customers = []int64{101, 102, 103, 104}

func main() { story.Main("invoice dedup (unique constraint)", run) }

func run(ctx context.Context, env *story.Env, v *story.Verdict) error {
	if _, err := env.Pool.Exec(ctx, schema); err != nil {
		return err
	}
	invoices, err := lockless.NewInsertOnce(ctx, env.Pool, lockless.InsertOnceSpec{
		Table:      lockless.Table{Name: "invoices"},
		Columns:    []string{"customer_id", "billing_period", "created_by"},
		ConflictOn: []string{"customer_id", "billing_period"},
		Returning:  []string{"invoice_id", "created_by"},
	})
	if err != nil {
		return err
	}

	env.Section(fmt.Sprintf("three workers invoice customers %v for %s, all at once, without a lock", customers, period))
	var seen int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM invoices WHERE customer_id = $1 AND billing_period = $2`,
		customers[0], period).Scan(&seen); err != nil {
		return err
	}
	env.Logf("worker-4", "customer %d has %d invoice(s) for %s: it decides to create one, then freezes", customers[0], seen, period)
	var (
		wg               sync.WaitGroup
		mu               sync.Mutex
		created, skipped int
		firstErr         error
	)
	start := make(chan struct{})
	for w := 1; w <= 3; w++ {
		who := fmt.Sprintf("worker-%d", w)
		for _, c := range customers {
			wg.Go(func() {
				<-start
				ok, err := createInvoice(ctx, env, invoices, who, c)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					firstErr = err
				case ok:
					created++
				default:
					skipped++
				}
			})
		}
	}
	close(start)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}

	env.Section("worker-4 resumes and inserts what it decided to insert before it froze")
	late, err := createInvoice(ctx, env, invoices, "worker-4", customers[0])
	if err != nil {
		return err
	}

	env.Section("code that forgot ON CONFLICT is refused by the constraint too")
	_, plainErr := env.Pool.Exec(ctx, `INSERT INTO invoices (customer_id, billing_period, created_by) VALUES ($1, $2, 'worker-5')`,
		customers[1], period)
	var pgErr *pgconn.PgError
	dup := errors.As(plainErr, &pgErr) && pgErr.Code == pgerrcode.UniqueViolation
	env.Logf("worker-5", "plain INSERT: %v", plainErr)

	env.Section("read back")
	type perCustomer struct {
		Customer int64
		N        int
		By       string
	}
	rows, _ := env.Pool.Query(ctx, `
		SELECT customer_id, count(*)::int, string_agg(created_by, ',') FROM invoices
		 WHERE billing_period = $1 GROUP BY customer_id ORDER BY customer_id`, period)
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[perCustomer])
	if err != nil {
		return err
	}
	once := len(got) == len(customers)
	for _, g := range got {
		env.Note("customer %d: %d invoice(s) for %s, created by %s", g.Customer, g.N, period, g.By)
		once = once && g.N == 1
	}
	v.Check(once, "exactly one invoice per customer and period (%d customers, %d invoices)", len(customers), len(got))
	v.Check(created == len(customers) && skipped == 2*len(customers),
		"of %d concurrent attempts, %d got a row back and %d got zero rows and skipped", 3*len(customers), created, skipped)
	v.Check(!late, "the frozen worker's late insert got zero rows")
	v.Check(dup, "an INSERT without ON CONFLICT failed with unique_violation (23505)")
	return nil
}

// createInvoice is the insert-once statement, through lockless.InsertOnce: it
// reports whether this worker's insert created the invoice.
func createInvoice(ctx context.Context, env *story.Env, invoices *lockless.InsertOnce, who string, customer int64) (bool, error) {
	var id int64
	var by string
	won, err := invoices.Insert(ctx, env.Pool, []any{customer, period, who}, &id, &by)
	switch {
	case err != nil:
		return false, err
	case won:
		env.Logf(who, "customer %d: created invoice %d", customer, id)
	default:
		env.Logf(who, "customer %d: 0 rows: already invoiced (invoice %d, by %s): skip", customer, id, by)
	}
	return won, nil
}
