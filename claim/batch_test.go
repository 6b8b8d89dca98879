package claim_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// staleAndFresh returns two attempts of one job: the first rescued after its
// lease expired, the second claimed since and running.
func staleAndFresh(t *testing.T, c *claim.Claimer, pool *pgxpool.Pool, id int64) (stale, fresh *claim.Job) {
	t.Helper()
	stale = claimOne(t, c, time.Minute)
	expire(t, pool, id)
	if requeued, _, err := c.Rescue(context.Background(), 100); err != nil || requeued != 1 {
		t.Fatalf("rescue = %d requeued, %v; want 1 requeued", requeued, err)
	}
	fresh = claimOne(t, c, time.Minute)
	if fresh.ID != stale.ID || fresh.Fence == stale.Fence {
		t.Fatalf("re-claim: %+v after %+v", fresh, stale)
	}
	return stale, fresh
}

// A batch may hold two attempts of the same job (a stale worker's late
// completion and the new attempt's): each is told by its own id + fence, so
// the stale one is refused although its id is in the answer.
func TestBatchesTellAttemptsOfOneJobApart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)

	t.Run("renew", func(t *testing.T) {
		qn := queue("batch-renew")
		c := newClaimer(t, pool, qn)
		stale, fresh := staleAndFresh(t, c, pool, enqueue(t, pool, claim.NewJob{Queue: qn}))
		lost, err := c.RenewManyForTest(ctx, []*claim.Job{stale, fresh}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(lost) != 1 || lost[0] != stale {
			t.Fatalf("lost %v, want only the stale attempt (fence %d)", lost, stale.Fence)
		}
	})
	t.Run("complete", func(t *testing.T) {
		qn := queue("batch-complete")
		c := newClaimer(t, pool, qn)
		stale, fresh := staleAndFresh(t, c, pool, enqueue(t, pool, claim.NewJob{Queue: qn}))
		res, err := c.CompleteManyForTest(ctx, []*claim.Job{stale, fresh})
		if err != nil {
			t.Fatal(err)
		}
		mustLeaseLost(t, "stale attempt in a batch", res[0])
		if res[1] != nil {
			t.Fatalf("fresh attempt: %v, want completed", res[1])
		}
	})
	t.Run("complete and claim", func(t *testing.T) {
		qn := queue("batch-completeclaim")
		c := newClaimer(t, pool, qn)
		stale, fresh := staleAndFresh(t, c, pool, enqueue(t, pool, claim.NewJob{Queue: qn}))
		res, _, err := c.CompleteAndClaimForTest(ctx, []*claim.Job{fresh, stale}, 1, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if res[0] != nil {
			t.Fatalf("fresh attempt: %v, want completed", res[0])
		}
		mustLeaseLost(t, "stale attempt in a batch", res[1])
	})
	t.Run("settle", func(t *testing.T) {
		// After the fresh attempt completed (its answer lost, say), settling
		// both: the row reads back completed under the fresh fence only.
		qn := queue("batch-settle")
		c := newClaimer(t, pool, qn)
		stale, fresh := staleAndFresh(t, c, pool, enqueue(t, pool, claim.NewJob{Queue: qn}))
		if err := c.Complete(ctx, fresh); err != nil {
			t.Fatal(err)
		}
		res, err := c.SettleManyForTest(ctx, []*claim.Job{stale, fresh})
		if err != nil {
			t.Fatal(err)
		}
		mustLeaseLost(t, "stale attempt settled", res[0])
		if res[1] != nil {
			t.Fatalf("fresh attempt: %v, want completed", res[1])
		}
	})
}
