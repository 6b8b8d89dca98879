package advisory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/advisory"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

func TestSessionLock(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	for _, k := range []advisory.Key{key(t, "session"), advisory.Int64Key(-1), advisory.PairKey(-7, 9)} {
		s, err := advisory.TryLockSession(ctx, pool, k)
		if err != nil {
			t.Fatal(err)
		}
		if held, err := s.Held(ctx); !held || err != nil {
			t.Fatalf("%v: held %v %v", k, held, err)
		}
		// Session and transaction locks on one key exclude each other.
		if tryFrom(t, pool, k) {
			t.Fatalf("%v: a transaction took a key held at session level", k)
		}
		if _, err := advisory.TryLockSession(ctx, pool, k); !errors.Is(err, pgfence.ErrNotAcquired) {
			t.Fatalf("%v: second session lock: %v", k, err)
		}
		wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err = advisory.LockSession(wctx, pool, k)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%v: waiting session lock: %v", k, err)
		}
		if err := s.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.Unlock(ctx); err != nil {
			t.Fatalf("second unlock: %v", err)
		}
		if held, _ := s.Held(ctx); held || !tryFrom(t, pool, k) {
			t.Fatalf("%v: still held after Unlock", k)
		}
	}
}

func TestSessionLockReleasedWhenConnectionDrops(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	k := key(t, "session-drop")
	s, err := advisory.LockSession(ctx, pool, k)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Unlock(ctx)
	var pid int32
	pool.QueryRow(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1
		AND objid = $1::bigint::oid LIMIT 1`, func() int64 { id, _ := advisory.KeyID(k); return int64(uint32(id)) }()).Scan(&pid)
	if pid == 0 {
		t.Fatal("lock not visible in pg_locks")
	}
	pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid)
	eventually(t, 5*time.Second, "still held after the session's connection dropped",
		func() bool { return tryFrom(t, pool, k) })
	if held, err := s.Held(ctx); held || err == nil {
		t.Fatalf("Held after the drop: %v, %v; want false with an error", held, err)
	}
}
