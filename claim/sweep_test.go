package claim_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// insertJobs adds n jobs to queue q in the given state (setup in SQL, not
// through claim). finishedAgo sets finished_at that long ago for completed
// and dead jobs; running jobs get a lease an hour long.
func insertJobs(t *testing.T, pool *pgxpool.Pool, q, state string, n int, finishedAgo time.Duration) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `
INSERT INTO pgfence_jobs (queue, state, attempt, fence, owner, expires_at, finished_at)
SELECT $1, $2, CASE WHEN $2 = 'available' THEN 0 ELSE 1 END,
       CASE WHEN $2 = 'available' THEN NULL ELSE nextval('pgfence_fence_seq') END,
       CASE WHEN $2 = 'available' THEN NULL ELSE 'filler' END,
       CASE WHEN $2 = 'running' THEN now() + interval '1 hour' END,
       CASE WHEN $2 IN ('completed', 'dead') THEN now() - $4::bigint * interval '1 microsecond' END
  FROM generate_series(1, $3::int)`, q, state, n, finishedAgo.Microseconds()); err != nil {
		t.Fatal(err)
	}
}

// countJobs is how many rows of queue q are in each state, as
// "state:count,..." in state order.
func countJobs(t *testing.T, pool *pgxpool.Pool, q string) string {
	t.Helper()
	var s *string
	if err := pool.QueryRow(context.Background(), `SELECT string_agg(state || ':' || n, ',' ORDER BY state)
  FROM (SELECT state, count(*) AS n FROM pgfence_jobs WHERE queue = $1 GROUP BY state) x`, q).Scan(&s); err != nil {
		t.Fatal(err)
	}
	if s == nil {
		return ""
	}
	return *s
}

// Only finished jobs older than the cutoff, of the claimer's queue, go,
// whatever the batch size: sizes that divide the table exactly (the last
// batch full, then an empty one), that leave a remainder, and that exceed it.
func TestSweepFinishedBatchBoundaries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, batch := range []int{1, 7, 150, 450, 451, 1000} {
		t.Run(fmt.Sprint(batch), func(t *testing.T) {
			pool := pgtest.SchemaPool(t)
			// Interleaved in id order, 450 rows in all.
			for range 2 {
				insertJobs(t, pool, "q", "completed", 50, 48*time.Hour) // swept
				insertJobs(t, pool, "q", "dead", 50, 48*time.Hour)      // swept
				insertJobs(t, pool, "q", "completed", 50, time.Minute)  // too recent
				insertJobs(t, pool, "q", "available", 25, 0)
				insertJobs(t, pool, "q", "running", 25, 0)
				insertJobs(t, pool, "other", "completed", 25, 48*time.Hour) // another queue
			}
			c := newClaimer(t, pool, "q", claim.SweepBatchForTest(batch))
			n, err := c.SweepFinished(ctx, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if n != 200 {
				t.Fatalf("swept %d jobs, want 200", n)
			}
			if got, want := countJobs(t, pool, "q"), "available:50,completed:100,running:50"; got != want {
				t.Errorf("left %s, want %s", got, want)
			}
			if got, want := countJobs(t, pool, "other"), "completed:50"; got != want {
				t.Errorf("other queue: left %s, want %s", got, want)
			}
		})
	}
}

// A sweep runs while 6 workers claim and complete the queue's jobs, which
// are interleaved in id order with old finished ones: the old ones go, and
// every job completed during the sweep stays (it is newer than the cutoff);
// no claimed job disappears under its worker (every Complete succeeds).
// Then sweeps with no age limit run back to back while the workers go on:
// still no job is deleted before it finished.
func TestSweepFinishedConcurrentWithClaims(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := pgtest.SchemaPool(t, func(c *pgxpool.Config) { c.MaxConns = 10 })
	for range 20 {
		insertJobs(t, pool, "q", "available", 20, 0)
		insertJobs(t, pool, "q", "completed", 25, 48*time.Hour)
	}
	c := newClaimer(t, pool, "q", claim.SweepBatchForTest(4))

	// work starts 6 workers that claim and complete until the queue is
	// empty; wait waits for them.
	work := func(t *testing.T) (wait func()) {
		var wg sync.WaitGroup
		for range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					jobs, err := c.Claim(ctx, 1, time.Minute)
					if err != nil {
						t.Error(err)
						return
					}
					if len(jobs) == 0 {
						return
					}
					if err := c.Complete(ctx, jobs[0]); err != nil {
						t.Errorf("complete job %d during a sweep: %v", jobs[0].ID, err)
						return
					}
				}
			}()
		}
		return wg.Wait
	}

	pgtest.Step(t, "one sweep of what finished over an hour ago", func(t *testing.T) {
		wait := work(t)
		n, err := c.SweepFinished(ctx, time.Hour)
		wait()
		if err != nil {
			t.Fatal(err)
		}
		if n != 500 {
			t.Fatalf("swept %d jobs, want the 500 old ones", n)
		}
		if got, want := countJobs(t, pool, "q"), "completed:400"; got != want {
			t.Fatalf("left %s, want %s (every job completed during the sweep)", got, want)
		}
	})

	pgtest.Step(t, "sweeps with no age limit, back to back, while jobs are claimed and completed", func(t *testing.T) {
		insertJobs(t, pool, "q", "available", 400, 0)
		stop := make(chan struct{})
		var swept atomic.Int64
		sweepErr := make(chan error, 1)
		go func() {
			defer close(sweepErr)
			for {
				select {
				case <-stop:
					return
				default:
				}
				n, err := c.SweepFinished(ctx, 0)
				if err != nil {
					sweepErr <- err
					return
				}
				swept.Add(n)
			}
		}()
		wait := work(t)
		wait()
		close(stop)
		if err := <-sweepErr; err != nil {
			t.Fatal(err)
		}
		n, err := c.SweepFinished(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if total := swept.Load() + n; total != 800 {
			t.Fatalf("swept %d jobs in all, want the 800 completed ones", total)
		}
		if got := countJobs(t, pool, "q"); got != "" {
			t.Fatalf("left %s, want nothing", got)
		}
	})
}

// cancelAfter is a query tracer that cancels a context once n statements
// ended: a context that ends between two batches, at a known point.
type cancelAfter struct {
	n      atomic.Int64
	cancel context.CancelFunc
}

func (c *cancelAfter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (c *cancelAfter) TraceQueryEnd(_ context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if c.n.Add(-1) == 0 {
		c.cancel()
	}
}

// A sweep whose context ends between batches returns the jobs deleted so
// far with the context's error; the next sweep deletes the rest.
func TestSweepFinishedCanceledMidway(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tracer := &cancelAfter{cancel: cancel}
	pool := pgtest.SchemaPool(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = tracer })
	insertJobs(t, pool, "q", "completed", 50, time.Hour)
	c := newClaimer(t, pool, "q", claim.SweepBatchForTest(10))
	tracer.n.Store(3) // New's checks are done: three batches, then the cancel
	n, err := c.SweepFinished(ctx, time.Minute)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %d jobs and %v, want context.Canceled", n, err)
	}
	if n != 30 {
		t.Fatalf("swept %d jobs before the cancel, want 30 (3 batches of 10)", n)
	}
	if got := countJobs(t, pool, "q"); got != "completed:20" {
		t.Fatalf("left %s, want completed:20", got)
	}
	if n, err := c.SweepFinished(context.Background(), time.Minute); err != nil || n != 20 {
		t.Fatalf("second sweep: %d jobs, %v; want 20", n, err)
	}
}

// A table of one's own: integer ids, other column names, no queue column.
// Without a FinishedAt column SweepFinished refuses, naming it.
func TestSweepFinishedOwnTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.SchemaPool(t)
	if _, err := pool.Exec(ctx, `
CREATE TABLE "My Mails" (
  mail_id    integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  status     varchar(16) NOT NULL DEFAULT 'available',
  prio       smallint NOT NULL DEFAULT 0,
  not_before timestamptz NOT NULL DEFAULT now(),
  tries      smallint NOT NULL DEFAULT 0,
  max_tries  smallint NOT NULL DEFAULT 3,
  token      bigint NOT NULL DEFAULT 0,
  worker     text,
  leased_to  timestamptz,
  done_at    timestamptz
);
INSERT INTO "My Mails" (status, done_at)
SELECT s, CASE WHEN s <> 'available' THEN now() - interval '2 days' END
  FROM unnest('{completed,dead,available,completed}'::text[]) s, generate_series(1, 5);
INSERT INTO "My Mails" (status, done_at) VALUES ('completed', now()), ('completed', NULL);`); err != nil {
		t.Fatal(err)
	}
	tb := claim.Table{Name: "My Mails", ID: "mail_id", State: "status", Priority: "prio", RunAt: "not_before",
		Attempt: "tries", MaxAttempts: "max_tries", Fence: "token", Owner: "worker", ExpiresAt: "leased_to", FinishedAt: "done_at"}
	c, err := claim.New(ctx, pool, claim.WithTable(tb), claim.SweepBatchForTest(3))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c.SweepFinished(ctx, time.Hour); err != nil || n != 15 {
		t.Fatalf("sweep = %d, %v; want 15", n, err)
	}
	var left string
	if err := pool.QueryRow(ctx, `SELECT string_agg(status || ':' || (done_at IS NULL), ',' ORDER BY mail_id) FROM "My Mails"`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if want := "available:true,available:true,available:true,available:true,available:true,completed:false,completed:true"; left != want {
		t.Fatalf("left %s, want %s", left, want)
	}

	tb.FinishedAt = ""
	c, err = claim.New(ctx, pool, claim.WithTable(tb))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SweepFinished(ctx, time.Hour); !errors.Is(err, pgfence.ErrInvalidInput) || !strings.Contains(err.Error(), "FinishedAt") {
		t.Fatalf("sweep without FinishedAt: %v, want pgfence.ErrInvalidInput naming FinishedAt", err)
	}
}

func TestSweepFinishedRefusesBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c := newClaimer(t, pool, queue("sweep-bad"))
	if _, err := c.SweepFinished(ctx, -time.Second); !errors.Is(err, pgfence.ErrInvalidInput) {
		t.Errorf("negative age: %v, want pgfence.ErrInvalidInput", err)
	}
}
