package pglease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/testsupport/dbenv"
	"github.com/pgfence/pgfence/internal/testsupport/otelxtest"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/migrations"
	"github.com/pgfence/pgfence/pglease"
)

// The database goes away under a held lease. A short outage is ridden out:
// renewals fail transiently and are retried until the local deadline, and
// the lease survives. A long outage ends the lease by the local deadline
// (fail closed), before the TTL the server would grant. A waiting Acquire
// retries through the outage and gets the key once the server is back.
func TestServerRestartUnderLeases(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a cluster of its own (about 8s); run without -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := dbenv.NewCluster(5435)
	if err != nil {
		t.Skipf("needs local PostgreSQL server binaries (initdb, postgres): %v", err)
	}
	t.Cleanup(func() { cl.Remove() })
	if err := cl.InitDB(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cl.Start(ctx, nil); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, cl.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	const ttl = 3 * time.Second
	met := otelxtest.New(t)
	c := newClient(t, pool, pglease.WithRenewInterval(250*time.Millisecond), pglease.WithMeterProvider(met.Provider))
	l, err := c.TryAcquire(ctx, "report:nightly", ttl)
	if err != nil {
		t.Fatal(err)
	}

	pgtest.Step(t, "a short outage is ridden out by retried renewals", func(t *testing.T) {
		// 600ms: shorter than TTL - margin - renew interval.
		cl.Stop()
		time.Sleep(600 * time.Millisecond) // the outage itself
		if err := cl.Start(ctx, nil); err != nil {
			t.Fatal(err)
		}
		// A renewal after the restart moves the local deadline on.
		before := l.Deadline()
		for limit := time.Now().Add(5 * time.Second); l.Deadline().Equal(before) && context.Cause(l.Context()) == nil && time.Now().Before(limit); {
			time.Sleep(10 * time.Millisecond)
		}
		if context.Cause(l.Context()) != nil {
			t.Fatalf("a short outage lost the lease: %v", context.Cause(l.Context()))
		}
		if err := l.Renew(ctx); err != nil {
			t.Fatalf("renew after restart: %v", err)
		}
		if met.Collect().Value("pgfence.lease.renew.failures") == 0 {
			t.Fatal("no renewal failed during the outage: the test did not exercise the retry")
		}
	})

	pgtest.Step(t, "an outage longer than the TTL ends the lease at its local deadline", func(t *testing.T) {
		deadline := l.Deadline()
		cl.Stop()
		select {
		case <-l.Context().Done():
		case <-time.After(ttl + time.Second):
			t.Fatal("lease still alive long after its TTL with the database down")
		}
		if late := time.Since(deadline); late > 100*time.Millisecond {
			t.Fatalf("lease ended %v after its local deadline", late)
		}
		if !errors.Is(context.Cause(l.Context()), pgfence.ErrLeaseLost) {
			t.Fatalf("cause %v, want pgfence.ErrLeaseLost", context.Cause(l.Context()))
		}
	})

	pgtest.Step(t, "a waiter started during the outage gets the key once the server is back", func(t *testing.T) {
		// It gets the key once the old lease has expired by the database clock.
		waiter := newClient(t, pool, pglease.WithBackoff(20*time.Millisecond, 200*time.Millisecond), pglease.WithMaxWait(30*time.Second))
		got := make(chan *pglease.Lease, 1)
		errs := make(chan error, 1)
		go func() {
			l2, err := waiter.Acquire(ctx, "report:nightly", ttl)
			if err != nil {
				errs <- err
				return
			}
			got <- l2
		}()
		time.Sleep(500 * time.Millisecond) // the waiter retries against the stopped server meanwhile
		if err := cl.Start(ctx, nil); err != nil {
			t.Fatal(err)
		}
		select {
		case l2 := <-got:
			if l2.Fence() <= l.Fence() {
				t.Fatalf("fence %d not above %d", l2.Fence(), l.Fence())
			}
			if err := l2.Release(ctx); err != nil {
				t.Fatal(err)
			}
		case err := <-errs:
			t.Fatalf("Acquire through the outage: %v", err)
		case <-time.After(20 * time.Second):
			t.Fatal("Acquire did not get the key after the server came back")
		}
	})
}
