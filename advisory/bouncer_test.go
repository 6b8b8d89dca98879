package advisory_test

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/advisory"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// Behind PgBouncer in transaction mode, with pgx's default query exec mode
// and a 16-connection pool: no two entries to a function ran at overlapping
// times for the same key, whatever the calls returned, and the functions'
// own statements (in the pool's default mode, named prepared statements)
// did not fail.
func TestMutualExclusionBehindBouncer(t *testing.T) {
	pool := pgtest.BouncerPool(t, func(c *pgxpool.Config) { c.MaxConns = 16 })
	key := advisory.Int64Key(time.Now().UnixNano())
	other := advisory.PairKey(7, 7)

	type span struct{ start, end time.Time }
	var mu sync.Mutex
	var ok, all []span
	var failed atomic.Int64
	call := func(do func(context.Context, *pgxpool.Pool, advisory.Key, func(context.Context, pgx.Tx) error) error) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		var s span
		err := do(ctx, pool, key, func(ctx context.Context, tx pgx.Tx) error {
			s.start = time.Now()
			defer func() { s.end = time.Now() }()
			var n int64
			if err := tx.QueryRow(ctx, "SELECT $1::bigint + 1", s.start.UnixNano()).Scan(&n); err != nil {
				return err
			}
			// The sleep keeps fn inside long enough that an overlap,
			// if the lock failed, would show in the spans.
			time.Sleep(time.Millisecond)
			return nil
		})
		if !s.start.IsZero() {
			mu.Lock()
			all = append(all, s)
			if err == nil {
				ok = append(ok, s)
			}
			mu.Unlock()
		}
		switch {
		case err == nil:
		case errors.Is(err, pgfence.ErrNotAcquired), errors.Is(err, context.DeadlineExceeded):
		default:
			failed.Add(1)
		}
	}
	var wg sync.WaitGroup
	for g := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 15 {
				switch (g + i) % 3 {
				case 0:
					call(advisory.TryDo)
				case 1:
					call(advisory.Do)
				default:
					// Unrelated traffic on the same server sessions.
					advisory.TryDo(context.Background(), pool, other, func(ctx context.Context, tx pgx.Tx) error { return nil })
				}
			}
		}()
	}
	wg.Wait()
	sort.Slice(all, func(i, j int) bool { return all[i].start.Before(all[j].start) })
	overlaps := 0
	for i := 1; i < len(all); i++ {
		if all[i].start.Before(all[i-1].end) {
			overlaps++
		}
	}
	t.Logf("%d entries to fn, %d calls succeeded, %d failed with other errors", len(all), len(ok), failed.Load())
	if overlaps != 0 {
		t.Fatalf("%d entries to fn began while another call's fn was inside", overlaps)
	}
	if failed.Load() != 0 {
		t.Fatalf("%d calls failed (the functions' own statements behind the pooler?)", failed.Load())
	}
	if len(ok) == 0 {
		t.Fatal("no call succeeded")
	}
}
