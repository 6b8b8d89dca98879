package watch

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// A watcher given a schema reads that schema's leases and stale-refusal
// counter, and none of another schema's, on a pool whose search_path names
// neither.
func TestWatcherReadsItsSchemaOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := pgtest.Pool(t)
	a, b := pgtest.Schema(t), pgtest.Schema(t)
	key := fmt.Sprintf("watched-%d", rand.Int64())
	q := pgx.Identifier{a}.Sanitize()
	if _, err := pool.Exec(ctx, `INSERT INTO `+q+`.lock_leases (lock_key, owner, owner_token, fence, acquired_at, expires_at)
		VALUES ($1, 'w', 't', `+q+`.pgfence_next_fence(), now(), now() + interval '1 hour')`, key); err != nil {
		t.Fatal(err)
	}
	for s, want := range map[string]bool{a: true, b: false} {
		w := New(pool, Options{Schema: s})
		if err := w.Refresh(ctx); err != nil {
			t.Fatalf("watch %s: %v", s, err)
		}
		snap, _, _ := w.Latest()
		found := false
		for _, l := range snap.Leases.List {
			found = found || l.Key == key
		}
		if found != want || !snap.Stale.Present {
			t.Fatalf("watch %s: lease %s listed %v, want %v; stale counter present %v", s, key, found, want, snap.Stale.Present)
		}
	}
}
