package pglease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// The release statement sets synchronous_commit for its own transaction: off
// by default, on with WithDurableRelease; the acquire statement raises it to
// on when the session has it off. The setting each statement leaves in force
// is read back inside the same transaction.
func TestCommitDurabilityPerStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
		cfg.MaxConns = 1 // one session, so the traced settings are its own
	})
	key := uniqueKey(t)
	t.Run("synchronous_commit is off for a plain write, on for a fence draw or commit_durably", func(t *testing.T) {
		var inTx []string
		trace := func(sql string, args ...any) {
			t.Helper()
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			rows, err := tx.Query(ctx, sql, args...)
			if err != nil {
				t.Fatal(err)
			}
			rows.Close()
			var s string
			if err := tx.QueryRow(ctx, "SHOW synchronous_commit").Scan(&s); err != nil {
				t.Fatal(err)
			}
			inTx = append(inTx, s)
		}
		trace(`INSERT INTO lock_leases (lock_key, owner, owner_token, fence, acquired_at, expires_at)
		       VALUES ($1, 'o', 't', 1, now(), now() + interval '1 minute')`, key)
		trace(`SELECT pgfence_next_fence()`)
		trace(`SELECT pgfence_commit_durably()`)
		if strings.Join(inTx, ",") != "off,on,on" {
			t.Fatalf("synchronous_commit after a plain insert, a fence draw, pgfence_commit_durably(): %v; want off,on,on", inTx)
		}
	})

	// Through the client: the released lease's outcome is right in every case.
	pgtest.Step(t, "a release ends the lease as released", func(t *testing.T) {
		c := newClient(t, pool)
		l, err := c.TryAcquire(ctx, key+"/c", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(context.Cause(l.Context()), pglease.ErrReleased) {
			t.Fatalf("cause %v, want ErrReleased", context.Cause(l.Context()))
		}
	})
	pgtest.Step(t, "a durable release leaves the row released", func(t *testing.T) {
		durable := newClient(t, pool, pglease.WithDurableRelease())
		l, err := durable.TryAcquire(ctx, key+"/c", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		var released bool
		if err := pool.QueryRow(ctx, "SELECT expires_at <= now() FROM lock_leases WHERE lock_key = $1", key+"/c").Scan(&released); err != nil || !released {
			t.Fatalf("durable release left the lease held: %v %v", released, err)
		}
	})
}

// Release of a lease already lost says how: expired (its row still carries
// its fence) or taken (another fence, or the row was swept).
func TestReleaseOfLostLeaseSaysHow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := newClient(t, pool, pglease.WithoutAutoRenew())
	key := uniqueKey(t)
	pgtest.Step(t, "expired", func(t *testing.T) {
		l, err := c.TryAcquire(ctx, key, 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // the point: the 50ms TTL runs out by the database clock
		if err := l.Release(ctx); !errors.Is(err, pgfence.ErrLeaseLost) || !strings.Contains(err.Error(), "had expired") {
			t.Fatalf("release after expiry: %v", err)
		}
	})

	pgtest.Step(t, "taken by another owner", func(t *testing.T) {
		l, err := c.TryAcquire(ctx, key, 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // the point: the 50ms TTL runs out by the database clock
		other := newClient(t, pool)
		l2, err := other.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); !errors.Is(err, pgfence.ErrLeaseLost) || !strings.Contains(err.Error(), "another owner") {
			t.Fatalf("release after another owner took the key: %v", err)
		}
		var held bool
		if err := pool.QueryRow(ctx, "SELECT expires_at > now() FROM lock_leases WHERE lock_key = $1", key).Scan(&held); err != nil || !held {
			t.Fatalf("the stale release touched the new holder's lease: held %v, %v", held, err)
		}
		if err := l2.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})

	pgtest.Step(t, "the row was swept", func(t *testing.T) {
		if _, err := pool.Exec(ctx, "DELETE FROM lock_leases WHERE lock_key = $1", key); err != nil {
			t.Fatal(err)
		}
		l3, err := c.TryAcquire(ctx, key, 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, "DELETE FROM lock_leases WHERE lock_key = $1", key); err != nil {
			t.Fatal(err)
		}
		if err := l3.Release(ctx); !errors.Is(err, pgfence.ErrLeaseLost) {
			t.Fatalf("release of a swept row: %v", err)
		}
	})
}
