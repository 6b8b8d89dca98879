package metricstest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/testsupport/otelxtest"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

var (
	opTry      = attribute.String("op", "try")
	opWait     = attribute.String("op", "wait")
	granted    = attribute.String("outcome", "granted")
	refused    = attribute.String("outcome", "refused")
	leaseUnits = map[string]string{
		"pgfence.lease.acquire.duration":   "s",
		"pgfence.lease.acquisitions":       "{call}",
		"pgfence.lease.wait.duration":      "s",
		"pgfence.lease.held":               "{lease}",
		"pgfence.lease.held.duration":      "s",
		"pgfence.db.pool.connections":      "{connection}",
		"pgfence.db.pool.connections.max":  "{connection}",
		"pgfence.db.pool.acquires":         "{acquire}",
		"pgfence.db.pool.acquires.empty":   "{acquire}",
		"pgfence.db.pool.acquire.wait":     "s",
		"pgfence.db.pool.acquire.duration": "s",
	}
)

func cause(c string) attribute.KeyValue { return attribute.String("cause", c) }

// expireInDB ends key's lease by the database clock, as if its TTL had run.
func expireInDB(t *testing.T, ctx context.Context, key string) {
	t.Helper()
	if _, err := pgtest.Pool(t).Exec(ctx, "UPDATE lock_leases SET expires_at = now() - interval '1 second' WHERE lock_key = $1", key); err != nil {
		t.Fatal(err)
	}
}

// Acquisitions granted and refused, one Acquire that waits, leases held and
// their time, and the pool's figures.
func TestMetricsAcquire(t *testing.T) {
	ctx := context.Background()
	r := otelxtest.New(t)
	pool := pgtest.Pool(t)
	a := newClient(t, pool, pglease.WithMeterProvider(r.Provider))
	b := newClient(t, pool, pglease.WithMeterProvider(r.Provider), pglease.WithBackoff(time.Millisecond, 5*time.Millisecond))
	key := uniqueKey(t)

	l, err := a.TryAcquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquire(ctx, key, 10*time.Second); !errors.Is(err, pgfence.ErrNotAcquired) {
		t.Fatalf("second TryAcquire: %v", err)
	}
	s := r.Collect()
	if got := s.Value("pgfence.lease.acquisitions", opTry, granted); got != 1 {
		t.Errorf("granted tries = %v, want 1", got)
	}
	if got := s.Value("pgfence.lease.acquisitions", opTry, refused); got != 1 {
		t.Errorf("refused tries = %v, want 1", got)
	}
	if got := s.Value("pgfence.lease.acquire.duration", opTry); got != 2 {
		t.Errorf("try latency samples = %v, want 2", got)
	}
	if got := s.Value("pgfence.lease.held"); got != 1 {
		t.Errorf("held = %v, want 1", got)
	}
	if got := s.Value("pgfence.db.pool.connections.max"); got < 1 {
		t.Errorf("pool max conns = %v", got)
	}
	if got := s.Value("pgfence.db.pool.acquires"); got < 2 {
		t.Errorf("pool acquires = %v, want >= 2", got)
	}

	// An Acquire that waits: the key is released 100 ms after it started;
	// however many attempts that took, the call counts once.
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		l2, err := b.Acquire(ctx, key, 10*time.Second)
		if err == nil {
			err = l2.Release(ctx)
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s = r.Collect()
	if got := s.Value("pgfence.lease.acquisitions", opWait, granted); got != 1 {
		t.Errorf("granted waits = %v, want 1 (one per call, not per attempt)", got)
	}
	if got := s.Value("pgfence.lease.acquisitions", opWait, refused); got != 0 {
		t.Errorf("refused waits = %v, want 0", got)
	}
	waited := s.Value("pgfence.lease.wait.duration")
	if elapsed := time.Since(start); waited <= 0 || waited > elapsed.Seconds() {
		t.Errorf("wait.duration = %v, want in (0, %v]", waited, elapsed)
	}
	if got := s.Value("pgfence.lease.held"); got != 0 {
		t.Errorf("held = %v after both released, want 0", got)
	}
	if got := s.Value("pgfence.lease.held.duration"); got != 2 {
		t.Errorf("held.duration samples = %v, want 2", got)
	}
	for name, unit := range leaseUnits {
		if s.Unit(name) != unit {
			t.Errorf("%s: unit %q, want %q (collected: %v)", name, s.Unit(name), unit, s.Has(name))
		}
	}
	if got := s.Value("pgfence.lease.lost"); got != 0 {
		t.Errorf("lost = %v, want 0", got)
	}

	// An Acquire that gives up is refused.
	l3, err := a.TryAcquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, pool, pglease.WithMeterProvider(r.Provider), pglease.WithMaxWait(20*time.Millisecond))
	if _, err := c.Acquire(ctx, key, 10*time.Second); !errors.Is(err, pgfence.ErrNotAcquired) {
		t.Fatalf("Acquire past its maximum wait: %v", err)
	}
	if got := r.Collect().Value("pgfence.lease.acquisitions", opWait, refused); got != 1 {
		t.Errorf("refused waits = %v, want 1", got)
	}
	l3.Release(ctx)
}

// Each cause of a lost lease that a test can provoke (renewal failures:
// pglease's TestMetricsRenewFailures, which needs its renew hook).
func TestMetricsLost(t *testing.T) {
	ctx := context.Background()
	r := otelxtest.New(t)
	pool := pgtest.Pool(t)
	manual := newClient(t, pool, pglease.WithMeterProvider(r.Provider), pglease.WithoutAutoRenew())
	other := newClient(t, pool)

	// expired: the database ended it and nobody took the key.
	key := uniqueKey(t)
	l, err := manual.TryAcquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	expireInDB(t, ctx, key)
	if err := l.Renew(ctx); !errors.Is(err, pgfence.ErrLeaseLost) {
		t.Fatalf("renew of an expired lease: %v", err)
	}
	// taken_over, seen by a renewal, and seen by a release.
	for _, byRelease := range []bool{false, true} {
		key := uniqueKey(t)
		l, err := manual.TryAcquire(ctx, key, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		expireInDB(t, ctx, key)
		l2, err := other.TryAcquire(ctx, key, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if byRelease {
			err = l.Release(ctx)
		} else {
			err = l.Renew(ctx)
		}
		if !errors.Is(err, pgfence.ErrLeaseLost) {
			t.Fatalf("lease taken over (release %v): %v", byRelease, err)
		}
		l2.Release(ctx)
	}
	// local_deadline: no renewal before the local deadline.
	l, err = manual.TryAcquire(ctx, uniqueKey(t), 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	<-l.Context().Done()
	// release_failed: Release failed (its context had ended), then the
	// local deadline passed. A TTL long enough that the local deadline
	// cannot pass before Release is called, even on a loaded machine.
	l, err = manual.TryAcquire(ctx, uniqueKey(t), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := l.Release(cctx); err == nil || errors.Is(err, pgfence.ErrLeaseLost) {
		t.Fatalf("release with an ended context: %v", err)
	}
	<-l.Context().Done()

	eventually(t, "the lost leases' releases", func() bool { return r.Collect().Value("pgfence.lease.held") == 0 })

	s := r.Collect()
	want := map[string]float64{"expired": 1, "taken_over": 2, "local_deadline": 1, "release_failed": 1, "unknown": 0}
	for c, n := range want {
		if got := s.Value("pgfence.lease.lost", cause(c)); got != n {
			t.Errorf("lost{cause=%s} = %v, want %v", c, got, n)
		}
	}
	if s.Unit("pgfence.lease.lost") != "{lease}" {
		t.Errorf("lost: unit %q", s.Unit("pgfence.lease.lost"))
	}
	if got := s.Value("pgfence.lease.held.duration"); got != 5 {
		t.Errorf("held.duration samples = %v, want 5", got)
	}
}
