package payouts_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/payouts"
	"github.com/pgfence/pgfence/pglease"
)

// A payout through a provider that knows nothing of fences: durable intent
// first, a stable idempotency key on every attempt, guarded transitions,
// and reconciliation of what is left in SUBMITTING.
func Example() {
	ctx := context.Background()
	// A database where pgfence's migrations ran.
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "DELETE FROM payout_intents WHERE payout_id = 'po_example'"); err != nil {
		log.Fatal(err)
	}
	intents, err := payouts.New(ctx, pool)
	if err != nil {
		log.Fatal(err)
	}
	leases, err := pglease.New(pool)
	if err != nil {
		log.Fatal(err)
	}
	defer leases.Close()

	if _, err := intents.Create(ctx, pool, "po_example", 12_500, "EUR"); err != nil {
		log.Fatal(err)
	}
	err = leases.TryDo(ctx, "payout:po_example", 30*time.Second, func(ctx context.Context, l *pglease.Lease) error {
		p, err := intents.BeginSubmit(ctx, pool, "po_example", l.Fence())
		if err != nil {
			return err // stale, or already done
		}
		// ref, err := provider.Pay(ctx, p.AmountCents, p.Currency, p.IdempotencyKey)
		ref := "prov_" + p.IdempotencyKey[len(p.IdempotencyKey)-4:]
		_, err = intents.MarkSubmitted(ctx, pool, p.ID, l.Fence(), ref)
		return err
	})
	fmt.Println("paid:", err)

	p, err := intents.Get(ctx, pool, "po_example")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(p.State, p.Attempts, strings.HasPrefix(p.IdempotencyKey, "pgfence-payout-"))

	// The reconciliation job: nothing is stuck in SUBMITTING for a minute.
	stuck, err := intents.Stuck(ctx, pool, time.Minute, 100)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("stuck:", len(stuck))
	// Output:
	// paid: <nil>
	// SUBMITTED 1 true
	// stuck: 0
}
