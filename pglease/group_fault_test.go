package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/testsupport/otelxtest"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// batchMarker is in the AcquireBatch statement only (queries/internal/leases.sql).
const batchMarker = "pgfence_lease_acquire_batch("

// batchResult is what one caller of a batch got.
type batchResult struct {
	key string
	l   *pglease.Lease
	err error
}

// runFaultedBatch puts n attempts of c (callers with callerCtx) into one
// AcquireBatch statement: c's first GroupMaxInFlight attempts run alone and
// wait on row locks that a transaction of the test holds, n more queue
// behind them, and the transaction ends, so the queued ones go out together.
// arm runs just before that, to set the fault the batch meets. It returns
// the batch's results in key order.
func runFaultedBatch(t *testing.T, c *pglease.Client, direct *pgxpool.Pool, n int, callerCtx context.Context, arm func()) (batch []batchResult) {
	t.Helper()
	ctx := context.Background()
	base := uniqueKey(t)
	var firstKeys []string
	for i := range pglease.GroupMaxInFlight {
		firstKeys = append(firstKeys, fmt.Sprintf("%s/first%d", base, i))
	}
	other := newClient(t, direct)
	for _, k := range firstKeys { // rows to lock, released
		l, err := other.TryAcquire(ctx, k, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := direct.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT 1 FROM lock_leases WHERE lock_key = ANY ($1) FOR UPDATE", firstKeys); err != nil {
		t.Fatal(err)
	}
	firstErr := make(chan error, len(firstKeys))
	for _, k := range firstKeys {
		go func() {
			l, err := c.TryAcquire(ctx, k, time.Second)
			if err == nil {
				err = l.Release(ctx)
			}
			firstErr <- err
		}()
	}
	waitUntil(t, "the first attempts wait for their row locks", func() bool { return lockWaiters(t, direct) >= len(firstKeys) })
	results := make(chan batchResult, n)
	for i := range n {
		k := fmt.Sprintf("%s/batch%d", base, i)
		go func() { l, err := c.TryAcquire(callerCtx, k, time.Hour); results <- batchResult{k, l, err} }()
	}
	waitUntil(t, "the attempts queue for a batch", func() bool { return pglease.GroupPending(c) == n })
	arm()
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for range firstKeys {
		// Granted once the locks went, or refused at their lock_timeout.
		if err := <-firstErr; err != nil && !errors.Is(err, pgfence.ErrNotAcquired) {
			t.Fatalf("a first attempt: %v", err)
		}
	}
	for range n {
		batch = append(batch, <-results)
	}
	slices.SortFunc(batch, func(a, b batchResult) int { return strings.Compare(a.key, b.key) })
	if got := pglease.GroupBatched(c); got != int64(n) {
		t.Fatalf("%d attempts went out in batches, want one batch of %d", got, n)
	}
	return batch
}

// A batch's statement runs on the server but its answer is lost (the
// connection breaks): every caller still waiting asks by its owner token
// and keeps its own grant, exactly as a lone acquisition does.
func TestGroupAcquireBatchAnswerLostGrantsKept(t *testing.T) {
	ctx := context.Background()
	pool, proxy := proxiedPoolN(t, 4)
	direct := pgtest.Pool(t)
	q := fencedb.New(direct)
	met := otelxtest.New(t)
	c := newClient(t, pool, pglease.WithoutAutoRenew(), pglease.WithMeterProvider(met.Provider))

	var fired <-chan struct{}
	batch := runFaultedBatch(t, c, direct, 4, ctx, func() {
		fired = proxy.CutAfterSending(batchMarker, 200*time.Millisecond)
	})
	select {
	case <-fired:
	default:
		t.Fatal("the fault never fired: the batch's answer was not cut")
	}
	for _, r := range batch {
		if r.err != nil {
			t.Fatalf("%s: the batch ran but its caller was not given its grant: %v", r.key, r.err)
		}
		row, err := q.GetLease(ctx, r.key)
		if err != nil {
			t.Fatal(err)
		}
		if !row.Held || row.Fence != r.l.Fence() {
			t.Fatalf("%s: row %+v, lease fence %d", r.key, row, r.l.Fence())
		}
		if err := r.l.Renew(ctx); err != nil {
			t.Fatalf("%s: adopted lease cannot renew: %v", r.key, err)
		}
		if err := r.l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := met.Collect().Value("pgfence.lease.ambiguous.resolutions"); n < float64(len(batch)) {
		t.Fatalf("pgfence.lease.ambiguous.resolutions = %v, want at least %d (one per caller of the cut batch)", n, len(batch))
	}
}

// The batch's answer never comes and every caller gives up: the statement
// is cancelled, and what it granted on the server is given back, so the
// keys are free long before their hour-long TTL: at once (measured: 2 ms
// after the callers returned), or at the second give-back of the 4 keys
// (recheckLater, about 4.5 s later) for a grant written after the first.
// The client's Close waits for that second give-back.
func TestGroupAcquireBatchAnswerLostCallersGiveUp(t *testing.T) {
	ctx := context.Background()
	pool, proxy := proxiedPoolN(t, 4)
	direct := pgtest.Pool(t)
	c := newClient(t, pool, pglease.WithoutAutoRenew())

	callerCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var fired <-chan struct{}
	batch := runFaultedBatch(t, c, direct, 4, callerCtx, func() {
		fired = proxy.CutAfterSending(batchMarker, time.Minute) // the answer never arrives
		go func() { <-fired; cancel() }()                       // the callers give up once it ran
	})
	for _, r := range batch {
		if r.err == nil {
			t.Fatalf("%s: acquisition with no answer succeeded", r.key)
		}
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("%s: want the caller's context.Canceled, got %v", r.key, r.err)
		}
	}
	// A key whose row is missing is not free yet: the statement may have
	// taken its snapshot before the callers' tombstones and write after the
	// first give-back found nothing; the second give-back releases that grant.
	other := newClient(t, direct)
	for _, r := range batch {
		waitUntil(t, r.key+" is free again, the abandoned batch's grant given back", func() bool {
			l, err := other.TryAcquire(ctx, r.key, time.Second)
			if errors.Is(err, pgfence.ErrNotAcquired) {
				return false
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			return true
		})
	}
	// A late grant written after the check above is the second give-back's
	// too, which Close waits for.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, r := range batch {
		if n := rows(t, direct, `SELECT FROM lock_leases WHERE lock_key = $1 AND expires_at > now()`, r.key); n != 0 {
			t.Fatalf("%s: held after the client closed: the abandoned batch's grant was not given back", r.key)
		}
	}
}
