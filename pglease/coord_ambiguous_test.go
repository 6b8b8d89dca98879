package pglease_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// A permit acquisition whose answer is lost after it ran is adopted by a
// caller still waiting (found by its owner token), and released at once
// for a caller that gave up; the same for a key set.
func TestAmbiguousCoordinationAcquisitions(t *testing.T) {
	ctx := context.Background()
	direct := pgtest.Pool(t)
	held := func(t *testing.T, sql, key string) int {
		t.Helper()
		var n int
		if err := direct.QueryRow(ctx, sql, key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	t.Run("permit kept", func(t *testing.T) {
		pool, proxy := proxiedPool(t)
		key := uniqueKey(t)
		sem := semaphore(t, newClient(t, pool), key, 2)
		fired := proxy.CutAfterSending("pgfence_attempt(", 200*time.Millisecond)
		l, err := sem.TryAcquire(ctx, 5*time.Second)
		<-fired
		if err != nil {
			t.Fatalf("an ambiguous permit that was granted was not adopted: %v", err)
		}
		if n := held(t, `SELECT count(*) FROM lock_leases WHERE slot > 0 AND lock_key = $1 AND expires_at > now()`, key); n != 1 {
			t.Fatalf("%d permits held, want the adopted one", n)
		}
		if err := l.Renew(ctx); err != nil {
			t.Fatal(err)
		}
		l.Release(ctx)
	})
	t.Run("permit abandoned", func(t *testing.T) {
		pool, proxy := proxiedPool(t)
		key := uniqueKey(t)
		sem := semaphore(t, newClient(t, pool), key, 1)
		proxy.CutAfterSending("pgfence_attempt(", time.Minute)
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		if _, err := sem.TryAcquire(cctx, time.Hour); err == nil {
			t.Fatal("a permit with no answer was granted")
		}
		if n := held(t, `SELECT count(*) FROM lock_leases WHERE slot > 0 AND lock_key = $1`, key); n != 1 {
			t.Fatalf("the statement should have run: %d rows", n)
		}
		l, err := semaphore(t, newClient(t, direct), key, 1).TryAcquire(ctx, time.Second)
		if err != nil {
			t.Fatalf("the abandoned permit is still held (for its 1 h TTL): %v", err)
		}
		l.Release(ctx)
	})
	t.Run("key set abandoned", func(t *testing.T) {
		pool, proxy := proxiedPool(t)
		key := uniqueKey(t)
		c := newClient(t, pool)
		proxy.CutAfterSending("pgfence_take_set(", time.Minute)
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		if _, err := c.TryAcquireSet(cctx, []string{key + "/a", key + "/b"}, time.Hour); err == nil {
			t.Fatal("a key set with no answer was granted")
		}
		s, err := newClient(t, direct).TryAcquireSet(ctx, []string{key + "/a", key + "/b"}, time.Second)
		if err != nil {
			t.Fatalf("the abandoned set is still held: %v", err)
		}
		s.Release(ctx)
	})
}
