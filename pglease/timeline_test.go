package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// A client whose mark has seen a fence from a later WAL timeline than the
// server's (as after a failover that a stale primary, or a rewound cluster,
// does not know of) refuses the server's grant with ErrStaleTimeline, says
// which timelines, and gives the grant back: the key is free again. Without
// the check the grant is returned as a lease whose fence is below fences
// already handed out.
func TestGrantFromOlderTimelineIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mark := new(pgfence.TimelineMark)
	pool := pgtest.Pool(t)
	c := newClient(t, pool, pglease.WithTimelineMark(mark))
	l, err := c.TryAcquire(ctx, uniqueKey(t), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tl := pgfence.Timeline(l.Fence())
	if err := mark.Check((tl-1)<<44 | 1); !errors.Is(err, pgfence.ErrStaleTimeline) { // a fence of the timeline before
		t.Fatalf("the grant did not raise the shared mark to %d: %v", tl, err)
	}
	l.Release(ctx)

	if err := mark.Check((tl+1)<<44 | 1); err != nil { // a fence of the next timeline (pgfence.Timeline's encoding)
		t.Fatal(err)
	}
	key := uniqueKey(t)
	_, err = c.TryAcquire(ctx, key, time.Hour)
	if !errors.Is(err, pgfence.ErrStaleTimeline) {
		t.Fatalf("want ErrStaleTimeline, got %v", err)
	}
	t.Log(err)
	if want := fmt.Sprintf("is from WAL timeline %d, but a fence from timeline %d was already seen", tl, tl+1); !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want it to say %q", err, want)
	}
	q := fencedb.New(pool)
	waitUntil(t, "the refused grant is given back", func() bool {
		row, err := q.GetLease(ctx, key)
		return err == nil && !row.Held
	})
	if err := mark.Check(tl<<44 | 1); !errors.Is(err, pgfence.ErrStaleTimeline) {
		t.Errorf("after a refused fence, the mark lets timeline %d through: %v", tl, err)
	}
}
