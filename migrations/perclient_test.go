package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/payouts"
	"github.com/pgfence/pgfence/pgguard"
	"github.com/pgfence/pgfence/pglease"
)

// Two schemas side by side in one database, reached only through the
// clients' WithSchema options on one pool whose search_path names neither:
// each is a pgfence of its own, and nothing leaks across.
func TestPerClientSchemas(t *testing.T) {
	sideBySide(t, pgtest.Pool(t))
}

// The same behind PgBouncer in transaction mode, where a search_path startup
// parameter is no way to choose a schema.
func TestPerClientSchemasBehindBouncer(t *testing.T) {
	sideBySide(t, pgtest.BouncerPool(t))
}

// sideBySide runs the story on pool; admin statements that check where rows
// landed go through a direct pool.
func sideBySide(t *testing.T, pool *pgxpool.Pool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := pgtest.Pool(t)
	a, b := pgtest.Schema(t), pgtest.Schema(t)
	q := func(s string) string { return pgx.Identifier{s}.Sanitize() }
	count := func(t *testing.T, sql string) int64 {
		t.Helper()
		var n int64
		if err := admin.QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return n
	}
	// The pool's sessions do not name either schema.
	var path string
	if err := pool.QueryRow(ctx, "SHOW search_path").Scan(&path); err != nil || strings.Contains(path, a) || strings.Contains(path, b) {
		t.Fatalf("search_path %q (err %v) names a test schema", path, err)
	}

	t.Run("leases with auto-renew", func(t *testing.T) {
		key := fmt.Sprintf("side-%d", rand.Int64())
		var wg sync.WaitGroup
		leases := map[string]*pglease.Lease{}
		var mu sync.Mutex
		for _, s := range []string{a, b} {
			c, err := pglease.New(pool, pglease.WithSchema(s), pglease.WithOwner("owner-"+s), pglease.WithRenewInterval(50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			wg.Add(1)
			go func() { // the same key in both schemas at once: both granted
				defer wg.Done()
				l, err := c.TryAcquire(ctx, key, 2*time.Second)
				if err != nil {
					t.Errorf("schema %s: %v", s, err)
					return
				}
				mu.Lock()
				leases[s] = l
				mu.Unlock()
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		for _, s := range []string{a, b} {
			// Each schema's row is its own client's, with the fence of its own sequence.
			var owner string
			var fence, seq int64
			err := admin.QueryRow(ctx, `SELECT owner, fence, (SELECT last_value FROM `+q(s)+`.pgfence_fence_seq)
				FROM `+q(s)+`.lock_leases WHERE lock_key = $1`, key).Scan(&owner, &fence, &seq)
			if err != nil || owner != "owner-"+s || fence != leases[s].Fence() || fence&(1<<44-1) != seq {
				t.Fatalf("schema %s: row owner %q fence %d (sequence at %d), lease fence %d, err %v", s, owner, fence, seq, leases[s].Fence(), err)
			}
		}
		if n := count(t, `SELECT count(*) FROM public.lock_leases WHERE lock_key = '`+key+`'`); n != 0 {
			t.Fatalf("the default layout has %d rows of the key", n)
		}
		// Auto-renew runs in each lease's schema: the row's expiry moves.
		for _, s := range []string{a, b} {
			var first time.Time
			sql := `SELECT expires_at FROM ` + q(s) + `.lock_leases WHERE lock_key = '` + key + `'`
			if err := admin.QueryRow(ctx, sql).Scan(&first); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(10 * time.Second); ; {
				var now time.Time
				if err := admin.QueryRow(ctx, sql).Scan(&now); err != nil {
					t.Fatal(err)
				}
				if now.After(first) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("schema %s: the lease was not renewed in 10s", s)
				}
				time.Sleep(20 * time.Millisecond) // polling a background renewal
			}
			if err := leases[s].Release(ctx); err != nil {
				t.Fatalf("schema %s: release: %v", s, err)
			}
		}
		if n := count(t, `SELECT count(*) FROM `+q(a)+`.lock_leases WHERE lock_key = '`+key+`' AND expires_at > now()`); n != 0 {
			t.Fatalf("released lease still held in %s", a)
		}
	})

	t.Run("many acquisitions at once in both schemas", func(t *testing.T) {
		// Concurrent acquisitions on one client share a statement (group
		// acquire): the batched statement too stays in its schema.
		const n = 16
		prefix := fmt.Sprintf("many-%d-", rand.Int64())
		var wg sync.WaitGroup
		for _, s := range []string{a, b} {
			c, err := pglease.New(pool, pglease.WithSchema(s), pglease.WithoutAutoRenew())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					l, err := c.TryAcquire(ctx, fmt.Sprintf("%s%d", prefix, i), time.Minute)
					if err != nil {
						t.Errorf("schema %s, key %d: %v", s, i, err)
						return
					}
					if err := l.Release(ctx); err != nil {
						t.Errorf("schema %s, key %d: release: %v", s, i, err)
					}
				}()
			}
		}
		wg.Wait()
		for s, want := range map[string]int64{a: n, b: n, "public": 0} {
			if got := count(t, `SELECT count(*) FROM `+q(s)+`.lock_leases WHERE lock_key LIKE '`+prefix+`%'`); got != want {
				t.Errorf("schema %s has %d of the keys, want %d", s, got, want)
			}
		}
	})

	t.Run("guarded writes with the trigger", func(t *testing.T) {
		tbl := fmt.Sprintf("side_accounts_%d", rand.Uint32())
		if _, err := admin.Exec(ctx, `CREATE TABLE public.`+tbl+` (id int PRIMARY KEY, balance int NOT NULL, last_fence bigint NOT NULL DEFAULT 0);
			INSERT INTO public.`+tbl+` VALUES (1, 0)`); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { admin.Exec(context.Background(), "DROP TABLE IF EXISTS public."+tbl) })
		table := pgguard.Table{Schema: "public", Name: tbl, KeyColumn: "id"}
		if err := pgguard.InstallTrigger(ctx, pool, table, pgguard.Strict, pgguard.WithSchema(a)); err != nil {
			t.Fatal(err)
		}
		up, _, err := pgguard.TriggerMigration(table, pgguard.Strict, pgguard.WithSchema(a))
		if err != nil || !strings.Contains(up, q(a)+".pgfence_enforce_fence(") {
			t.Fatalf("TriggerMigration with A's schema: %v\n%s", err, up)
		}
		var fn string
		if err := admin.QueryRow(ctx, `SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = $1::regclass AND tgname = $2`,
			"public."+tbl, "pgfence_fence_guard").Scan(&fn); err != nil || !strings.Contains(fn, a+".pgfence_enforce_fence") {
			t.Fatalf("trigger %q (err %v) does not call %s's function", fn, err, a)
		}
		// B's ceiling far above A's: a fence B issued is above A's ceiling.
		fence := func(s string, n int) int64 {
			var f int64
			if err := admin.QueryRow(ctx, `SELECT max(`+q(s)+`.pgfence_next_fence()) FROM generate_series(1, $1)`, n).Scan(&f); err != nil {
				t.Fatal(err)
			}
			return f
		}
		a1, a2, bHigh := fence(a, 1), fence(a, 1), fence(b, 100)
		ga, err := pgguard.NewGuard(ctx, pool, table, pgguard.WithSchema(a))
		if err != nil {
			t.Fatal(err)
		}
		if err := ga.Update(ctx, pool, 1, a2, pgguard.Values{"balance": 1}); err != nil {
			t.Fatalf("A's newest fence: %v", err)
		}
		if err := ga.Update(ctx, pool, 1, a1, pgguard.Values{"balance": 2}); !errors.Is(err, pgguard.ErrStaleFence) {
			t.Fatalf("A's older fence: %v, want ErrStaleFence", err)
		}
		if err := ga.Update(ctx, pool, 1, bHigh, pgguard.Values{"balance": 3}); !errors.Is(err, pgguard.ErrFenceAboveCeiling) {
			t.Fatalf("B's fence %d through A's guard: %v, want ErrFenceAboveCeiling (A's ceiling is A's)", bHigh, err)
		}
		// A raw stale write under RunFenced is refused by the trigger (A's
		// function) and counted in A's counter only.
		err = pgguard.RunFenced(ctx, pool, a1, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE public.`+tbl+` SET balance = 9 WHERE id = 1`)
			return err
		}, pgguard.WithSchema(a))
		if !errors.Is(err, pgguard.ErrStaleFence) {
			t.Fatalf("raw stale write: %v, want ErrStaleFence", err)
		}
		if n := count(t, `SELECT coalesce(pg_sequence_last_value('`+q(a)+`.pgfence_stale_refusals'), 0)`); n != 1 {
			t.Fatalf("A counted %d trigger refusals, want 1", n)
		}
		if n := count(t, `SELECT coalesce(pg_sequence_last_value('`+q(b)+`.pgfence_stale_refusals'), 0)`); n != 0 {
			t.Fatalf("B counted %d trigger refusals, want 0", n)
		}
		// SetFence in B accepts B's fence.
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if err := pgguard.SetFence(ctx, tx, bHigh, pgguard.WithSchema(b)); err != nil {
			t.Fatalf("B's fence in B: %v", err)
		}
	})

	t.Run("claim runners", func(t *testing.T) {
		ids := map[string]int64{}
		for _, s := range []string{a, b} {
			enq, err := claim.New(ctx, pool, claim.WithSchema(s))
			if err != nil {
				t.Fatal(err)
			}
			id, err := enq.Enqueue(ctx, pool, claim.NewJob{Kind: "side"})
			if err != nil {
				t.Fatalf("enqueue in %s: %v", s, err)
			}
			ids[s] = id
		}
		c, err := claim.New(ctx, pool, claim.WithSchema(a))
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		ran := make(chan *claim.Job, 10)
		r, err := claim.NewRunner(c, func(ctx context.Context, j *claim.Job) error {
			ran <- j
			stop()
			return nil
		}, claim.WithPollInterval(10*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Run(rctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("runner: %v", err)
		}
		close(ran)
		var got []int64
		for j := range ran {
			got = append(got, j.ID)
			var seq int64
			if err := admin.QueryRow(ctx, `SELECT last_value FROM `+q(a)+`.pgfence_fence_seq`).Scan(&seq); err != nil || j.Fence&(1<<44-1) > seq {
				t.Fatalf("job fence %d not from A's sequence (at %d): %v", j.Fence, seq, err)
			}
		}
		if len(got) != 1 || got[0] != ids[a] {
			t.Fatalf("A's runner ran %v, want only A's job %d", got, ids[a])
		}
		var stateA, stateB string
		if err := admin.QueryRow(ctx, `SELECT (SELECT state FROM `+q(a)+`.pgfence_jobs WHERE id = $1), (SELECT state FROM `+q(b)+`.pgfence_jobs WHERE id = $2)`,
			ids[a], ids[b]).Scan(&stateA, &stateB); err != nil {
			t.Fatal(err)
		}
		if stateA != "completed" || stateB != "available" {
			t.Fatalf("states: A %s, B %s; want completed, available", stateA, stateB)
		}
	})

	t.Run("payouts", func(t *testing.T) {
		pa, err := payouts.New(ctx, pool, pgguard.WithSchema(a))
		if err != nil {
			t.Fatal(err)
		}
		pb, err := payouts.New(ctx, pool, pgguard.WithSchema(b))
		if err != nil {
			t.Fatal(err)
		}
		id := fmt.Sprintf("side-%d", rand.Int64())
		if _, err := pa.Create(ctx, pool, id, 100, "EUR"); err != nil {
			t.Fatal(err)
		}
		if _, err := pb.Get(ctx, pool, id); !errors.Is(err, pgfence.ErrNotFound) {
			t.Fatalf("B sees A's payout: %v", err)
		}
		var f int64
		if err := admin.QueryRow(ctx, `SELECT `+q(a)+`.pgfence_next_fence()`).Scan(&f); err != nil {
			t.Fatal(err)
		}
		p, err := pa.BeginSubmit(ctx, pool, id, f)
		if err != nil || p.State != payouts.Submitting {
			t.Fatalf("BeginSubmit in A: %+v %v", p, err)
		}
		if _, err := pb.Create(ctx, pool, id, 200, "USD"); err != nil {
			t.Fatalf("the same id in B is B's own: %v", err)
		}
	})
}

// Every per-client option refuses a name that is not a plain identifier,
// and a client pointed at a schema that was never migrated says what to run.
func TestPerClientSchemaInput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := pgtest.Pool(t)
	table := pgguard.Table{Schema: "public", Name: "payout_intents", KeyColumn: "payout_id"}
	for _, bad := range []string{"", `x"; DROP TABLE y; --`, " lead", "a/*b", strings.Repeat("s", 64)} {
		if _, err := pglease.New(pool, pglease.WithSchema(bad)); !errors.Is(err, pgfence.ErrInvalidInput) {
			t.Errorf("pglease.WithSchema(%q): %v, want pgfence.ErrInvalidInput", bad, err)
		}
		if _, err := claim.New(ctx, pool, claim.WithSchema(bad)); !errors.Is(err, pgfence.ErrInvalidInput) {
			t.Errorf("claim.WithSchema(%q): %v, want pgfence.ErrInvalidInput", bad, err)
		}
		if _, err := payouts.New(ctx, pool, pgguard.WithSchema(bad)); !errors.Is(err, pgfence.ErrInvalidInput) {
			t.Errorf("pgguard.WithSchema(%q): %v, want pgfence.ErrInvalidInput", bad, err)
		}
		if _, err := pgguard.NewGuard(ctx, pool, table, pgguard.WithSchema(bad)); !errors.Is(err, pgfence.ErrInvalidInput) {
			t.Errorf("pgguard.NewGuard(WithSchema(%q)): %v, want pgfence.ErrInvalidInput", bad, err)
		}
		if err := pgguard.InstallTrigger(ctx, pool, table, pgguard.Strict, pgguard.WithSchema(bad)); !errors.Is(err, pgfence.ErrInvalidInput) {
			t.Errorf("pgguard.InstallTrigger(WithSchema(%q)): %v, want pgfence.ErrInvalidInput", bad, err)
		}
	}

	const missing = "never_migrated"
	hint := "pgfence migrate up --schema " + missing
	wantHint := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), hint) {
			t.Errorf("%s on an unmigrated schema: %v; want an error saying %q", what, err, hint)
		}
	}
	c, err := pglease.New(pool, pglease.WithSchema(missing), pglease.WithoutAutoRenew())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.TryAcquire(ctx, "k", time.Minute)
	wantHint("pglease TryAcquire", err)
	_, err = claim.New(ctx, pool, claim.WithSchema(missing))
	wantHint("claim.New", err)
	_, err = payouts.New(ctx, pool, pgguard.WithSchema(missing))
	wantHint("payouts.New", err)
	_, err = pgguard.NewGuard(ctx, pool, table, pgguard.WithSchema(missing))
	wantHint("pgguard.NewGuard", err)
	err = pgguard.RunFenced(ctx, pool, 1, func(pgx.Tx) error { return nil }, pgguard.WithSchema(missing))
	wantHint("pgguard.RunFenced", err)
}
