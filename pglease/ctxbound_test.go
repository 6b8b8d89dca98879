package pglease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// callSlack is how long past its context's deadline a call may return: the
// stated bound (pgx ends a statement's read at the deadline; what is left
// to settle goes on in the background), with room for a loaded machine.
const callSlack = 250 * time.Millisecond

// lockRow holds a row lock on key's lease row from another connection until
// the returned function is called: statements that update the row (a
// renewal, a give-back) wait behind it, as they would on a slow server.
func lockRow(t *testing.T, key string) (unlock func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := pgtest.Pool(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM (SELECT 1 FROM lock_leases WHERE lock_key = $1 FOR UPDATE) l", key).Scan(&n); err != nil || n != 1 {
		t.Fatalf("locking %q: %d rows, %v", key, n, err)
	}
	return func() { tx.Rollback(ctx) }
}

// lockWaiters counts the backends of the package's database that wait for a
// lock. Only tests that run alone (not t.Parallel) may rely on the count:
// it sees every test's statements.
func lockWaiters(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// resolutions reads the counter pgfence.lease.ambiguous.resolutions by
// outcome and where.
func resolutions(t *testing.T, r *sdkmetric.ManualReader) map[[2]string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[[2]string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "pgfence.lease.ambiguous.resolutions" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				o, _ := dp.Attributes.Value(attribute.Key("outcome"))
				w, _ := dp.Attributes.Value(attribute.Key("where"))
				out[[2]string{o.AsString(), w.AsString()}] += dp.Value
			}
		}
	}
	return out
}

// A TryAcquire whose answer is lost, with a 300 ms context, while the
// server is slow to settle it (the give-back waits on a row lock): the call
// returns within its deadline plus callSlack, with the context's error, and
// the give-back finishes in the background once the server gets to it,
// counted as given_back/background. Before the give-back moved to the
// background, the call waited for it, up to 5 s past its deadline.
func TestTryAcquireReturnsWithItsContext(t *testing.T) {
	ctx := context.Background()
	pool, proxy := proxiedPoolN(t, 2)
	reader := sdkmetric.NewManualReader()
	c := newClient(t, pool, pglease.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	key := uniqueKey(t)
	direct := pgtest.Pool(t)
	q := fencedb.New(direct)

	fired := proxy.CutAfterSending("pgfence_lease_acquire(", time.Minute)
	locked := make(chan func(), 1)
	go func() {
		<-fired
		// The grant commits on the server; then its row is locked.
		for {
			if row, err := q.GetLease(ctx, key); err == nil && row.Held {
				break
			}
			time.Sleep(time.Millisecond)
		}
		locked <- lockRow(t, key)
	}()
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.TryAcquire(cctx, key, time.Hour)
	took := time.Since(start)
	t.Logf("TryAcquire returned after %v: %v", took.Round(time.Millisecond), err)
	if err == nil {
		t.Fatal("an acquisition with no answer succeeded")
	}
	if cctx.Err() == nil || !errorsIsDeadline(err) {
		t.Errorf("want the context's error, got %v", err)
	}
	if took > 300*time.Millisecond+callSlack {
		t.Errorf("TryAcquire took %v with a 300 ms context, want at most %v", took, 300*time.Millisecond+callSlack)
	}
	unlock := <-locked
	defer unlock()
	waitUntil(t, "the give-back waits behind the lock", func() bool { return lockWaiters(t, direct) > 0 })
	if row, err := q.GetLease(ctx, key); err != nil || !row.Held {
		t.Fatalf("the give-back did not wait for the row lock (%+v, %v): the test proves nothing", row, err)
	}
	unlock()
	waitUntil(t, "the background give-back releases the grant", func() bool {
		row, err := q.GetLease(ctx, key)
		return err == nil && !row.Held
	})
	waitUntil(t, "the give-back is counted", func() bool {
		return resolutions(t, reader)[[2]string{"given_back", "background"}] == 1
	})
}

// Release while an auto-renewal is stuck on a slow server (its statement
// waits on a row lock): Release returns within its context plus callSlack
// with an error, rather than wait for the renewal, which may last until the
// lease's local deadline (2.7 s here).
func TestReleaseReturnsWithItsContext(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := newClient(t, pool, pglease.WithRenewInterval(100*time.Millisecond))
	key := uniqueKey(t)
	l, err := c.TryAcquire(ctx, key, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	unlock := lockRow(t, key)
	defer unlock()
	waitUntil(t, "a renewal waits on the lock", func() bool { return lockWaiters(t, pool) > 0 })
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = l.Release(cctx)
	took := time.Since(start)
	t.Logf("Release returned after %v: %v", took.Round(time.Millisecond), err)
	if err == nil {
		t.Error("Release reported success while its statement could not run")
	}
	if took > 300*time.Millisecond+callSlack {
		t.Errorf("Release took %v with a 300 ms context, want at most %v", took, 300*time.Millisecond+callSlack)
	}
	unlock()
	if err := l.Release(ctx); err != nil {
		t.Fatalf("a second Release once the server answers: %v", err)
	}
}

func errorsIsDeadline(err error) bool { return errors.Is(err, context.DeadlineExceeded) }
