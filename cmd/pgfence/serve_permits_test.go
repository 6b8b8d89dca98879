package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/pgfence/pgfence/cmd/pgfence/internal/watch"
	"github.com/pgfence/pgfence/pglease"
)

// pgfence serve shows the permits held per semaphore key, the shared and
// exclusive holders of a shared/exclusive key and its exclusive waiters, and
// the fair waiters of a mutex key in queue order, in /metrics and
// /api/state.
func TestServePermits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, pool := serveDatabase(t)
	s := startServe(t, db)
	c, err := pglease.New(pool, pglease.WithBackoff(10*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 3 {
		if _, err := c.TryAcquire(ctx, "devices", time.Minute, pglease.Permits(4)); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := c.TryAcquire(ctx, "report", time.Minute, pglease.Shared()); err != nil {
			t.Fatal(err)
		}
	}
	wctx, stopWaiting := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := c.Acquire(wctx, "report", time.Minute)
		waited <- err
	}()
	defer func() { stopWaiting(); <-waited }()
	// Two fair waiters of a held mutex key, in this order.
	if _, err := c.TryAcquire(ctx, "job", time.Minute); err != nil {
		t.Fatal(err)
	}
	fairWaited := make(chan error, 2)
	for _, owner := range []string{"first", "second"} {
		fc, err := pglease.New(pool, pglease.WithOwner(owner), pglease.WithFairWaiting())
		if err != nil {
			t.Fatal(err)
		}
		defer fc.Close()
		go func() {
			_, err := fc.Acquire(wctx, "job", time.Minute)
			fairWaited <- err
		}()
		eventually(t, owner+" queued", func() string {
			n := 0
			pool.QueryRow(ctx, `SELECT count(*) FROM pgfence_waiters WHERE lock_key = 'job' AND owner = $1`, owner).Scan(&n)
			if n != 1 {
				return owner + " not queued yet"
			}
			return ""
		})
	}
	defer func() { stopWaiting(); <-fairWaited; <-fairWaited }()

	eventually(t, "/metrics shows the permits and the waiter", func() string {
		_, body := s.get(t, "/metrics")
		for _, w := range []struct {
			name   string
			labels []string
			value  float64
		}{
			{"pgfence_permits_in_use", []string{"key", "devices", "kind", "semaphore"}, 3},
			{"pgfence_permits", []string{"key", "devices"}, 4},
			{"pgfence_permits_in_use", []string{"key", "report", "kind", "shared"}, 2},
			{"pgfence_permits_in_use", []string{"key", "report", "kind", "exclusive"}, 0},
			{"pgfence_exclusive_waiters", []string{"key", "report"}, 1},
			{"pgfence_queue_waiters", []string{"key", "job", "kind", "exclusive"}, 2},
		} {
			if v, ok := metricValue(body, w.name, w.labels...); !ok || v != w.value {
				return fmt.Sprintf("%s%q = %v (found %v), want %v\n%s", w.name, w.labels, v, ok, w.value, body)
			}
		}
		return ""
	})
	_, js := s.get(t, "/api/state")
	var st watch.State
	if err := json.Unmarshal([]byte(js), &st); err != nil {
		t.Fatal(err)
	}
	if st.Data == nil || len(st.Data.Permits) != 2 || st.Data.Permits[0].Key != "devices" || st.Data.Permits[1].Waiters != 1 {
		t.Fatalf("/api/state permits: %s", js)
	}
	if h := st.Data.Permits[0].Holders; len(h) != 3 || h[0].Slot != 0 || h[2].Slot != 2 || h[0].Owner != c.Owner() {
		t.Fatalf("/api/state holders of devices: %+v", h)
	}
	if h := st.Data.Permits[1].Holders; len(h) != 2 || h[0].Exclusive || h[1].Exclusive {
		t.Fatalf("/api/state holders of report: %+v", h)
	}
	var queue []string
	for _, w := range st.Data.Waiters {
		queue = append(queue, fmt.Sprintf("%s %s %d %s", w.Key, w.Kind, w.Position, w.Owner))
	}
	if fmt.Sprint(queue) != "[job exclusive 0 first job exclusive 1 second]" {
		t.Fatalf("/api/state waiters: %q", queue)
	}
}
