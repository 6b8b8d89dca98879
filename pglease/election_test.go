package pglease_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// Three candidates campaign; at any moment at most one leads, epochs rise
// with every term, and when the leader's term is taken away (its lease
// expires under it) another candidate takes over with a higher epoch.
func TestCampaignOneLeaderRisingEpochs(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := pgtest.Pool(t)
	key := uniqueKey(t)
	var leading atomic.Int32
	var mu sync.Mutex
	var epochs []int64
	var wg sync.WaitGroup
	for i := range 3 {
		c := newClient(t, pool, pglease.WithBackoff(5*time.Millisecond, 30*time.Millisecond), pglease.WithRenewInterval(20*time.Millisecond))
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.Campaign(ctx, key, 500*time.Millisecond, func(ctx context.Context, term *pglease.Lease) error {
				epoch := term.Fence()
				if leading.Add(1) != 1 {
					t.Errorf("candidate %d: two leaders at once", i)
				}
				mu.Lock()
				epochs = append(epochs, epoch)
				mu.Unlock()
				// Lead for a while, then the term is cut short: an operator
				// expires the lease, as a lost renewal would.
				time.Sleep(30 * time.Millisecond) // the point: a term of some length
				leading.Add(-1)
				pool.Exec(context.Background(), "UPDATE lock_leases SET expires_at = now() WHERE lock_key = $1 AND fence = $2", key, epoch)
				<-ctx.Done()
				return nil
			})
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Campaign returned %v, want context.Canceled", err)
			}
		}()
	}
	pgtest.Step(t, "five terms follow one another", func(t *testing.T) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			n := len(epochs)
			mu.Unlock()
			if n >= 5 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("only %d terms in 10s", n)
			}
			time.Sleep(10 * time.Millisecond) // polled: terms end at the candidates' pace
		}
	})
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Run("epochs rise with every term", func(t *testing.T) {
		for i := 1; i < len(epochs); i++ {
			if epochs[i] <= epochs[i-1] {
				t.Fatalf("epochs not rising: %v", epochs)
			}
		}
	})
	t.Run("cancelled campaigns leave the lease free", func(t *testing.T) {
		h, ok, err := newClient(t, pool).Holder(context.Background(), key)
		if err != nil || !ok {
			t.Fatalf("Holder: %v %v", ok, err)
		}
		if h.Held {
			t.Fatalf("a cancelled campaign left the lease held: %+v", h)
		}
	})
}
