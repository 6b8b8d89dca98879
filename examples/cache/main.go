package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/examples/story"
	"github.com/pgfence/pgfence/pglease"
)

const schema = `
CREATE TABLE cache_entries (
  key      text        PRIMARY KEY,
  value    text        NOT NULL,
  version  int         NOT NULL,
  built_at timestamptz NOT NULL
);
-- One row per rebuild: the expensive work we want to do once.
CREATE TABLE rebuilds (
  id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  round int    NOT NULL,
  node  text   NOT NULL
);
`

const (
	cacheKey    = "report:daily"
	leaseKey    = "cache:" + cacheKey
	rebuildCost = 400 * time.Millisecond
	freshFor    = "1 minute"
)

type served int

const (
	servedFresh served = iota
	servedStale
	servedNothing
)

type node struct {
	name   string
	leases *pglease.Client
	env    *story.Env
}

func main() { story.Main("cache refresh (one rebuilds, the others wait or serve stale)", run) }

func run(ctx context.Context, env *story.Env, v *story.Verdict) error {
	if _, err := env.Pool.Exec(ctx, schema); err != nil {
		return err
	}
	var nodes []*node
	for i := 1; i <= 5; i++ {
		name := fmt.Sprintf("node-%d", i)
		leases, err := pglease.New(env.Pool, pglease.WithOwner(name),
			pglease.WithBackoff(20*time.Millisecond, 200*time.Millisecond), pglease.WithMaxWait(5*time.Second))
		if err != nil {
			return err
		}
		defer leases.Close()
		nodes = append(nodes, &node{name: name, leases: leases, env: env})
	}

	env.Section("round 1: the cache is cold; five requests arrive at once")
	env.Note("nothing to serve: a node that loses the lease waits for it (with jittered backoff and a maximum wait),")
	env.Note("then looks at the cache again before rebuilding")
	r1, _ := round(ctx, nodes, 1)
	n1, err := rebuildCount(ctx, env, 1)
	if err != nil {
		return err
	}
	v.Check(n1 == 1, "round 1 (cold): one rebuild for five requests (%d)", n1)
	v.Check(story.Count(r1, servedFresh) == 5, "round 1: every request was answered with the fresh report (%d of 5)", story.Count(r1, servedFresh))

	env.Section("an hour later: the entry is stale; five requests arrive at once")
	if _, err := env.Pool.Exec(ctx, `UPDATE cache_entries SET built_at = built_at - interval '1 hour'`); err != nil {
		return err
	}
	env.Note("a stale copy exists: a node that loses the lease serves it at once instead of waiting")
	r2, took2 := round(ctx, nodes, 2)
	n2, err := rebuildCount(ctx, env, 2)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	v.Check(n2 == 1, "round 2 (stale): one rebuild for five requests (%d)", n2)
	stale, fresh := story.Count(r2, servedStale), story.Count(r2, servedFresh)
	// "Without waiting": each stale answer came before the rebuild ended.
	var rebuildTook time.Duration
	for i, s := range r2 {
		if s == servedFresh {
			rebuildTook = max(rebuildTook, took2[i])
		}
	}
	fast := 0
	for i, s := range r2 {
		if s == servedStale && took2[i] < rebuildTook {
			fast++
		}
	}
	v.Check(fresh == 1 && stale == 4 && fast == 4,
		"round 2: the rebuilder served the fresh report and the four others the stale copy without waiting for the rebuild (%d fresh, %d stale, %d fast)", fresh, stale, fast)
	return nil
}

// round sends one request to every node at once and returns what each
// served and how long it took.
func round(ctx context.Context, nodes []*node, n int) ([]served, []time.Duration) {
	results := make([]served, len(nodes))
	took := make([]time.Duration, len(nodes))
	// The rebuild outlasts the other requests' first look (as a real
	// rebuild, seconds, outlasts a lookup, milliseconds): the rebuilder
	// finishes only after every node has looked, which keeps the example
	// deterministic on a loaded machine.
	var wg, looked sync.WaitGroup
	looked.Add(len(nodes))
	for i, nd := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			results[i] = nd.get(ctx, n, sync.OnceFunc(looked.Done), looked.Wait)
			took[i] = time.Since(start)
		}()
	}
	wg.Wait()
	return results, took
}

// get serves the report: from the cache when fresh; else the node tries to
// become the rebuilder; if another node is rebuilding it serves the stale
// copy, or waits when there is none.
func (nd *node) get(ctx context.Context, round int, looked, othersLooked func()) served {
	defer looked()
	value, fresh, ok := nd.read(ctx)
	if ok && fresh {
		nd.env.Logf(nd.name, "cache hit: %s", value)
		return servedFresh
	}
	l, err := nd.leases.TryAcquire(ctx, leaseKey, 10*time.Second)
	looked()
	if errors.Is(err, pgfence.ErrNotAcquired) {
		if ok {
			nd.env.Logf(nd.name, "stale, and someone is rebuilding: serve the stale copy now (%s)", value)
			return servedStale
		}
		nd.env.Logf(nd.name, "miss, and someone is rebuilding: wait for the lease")
		l, err = nd.leases.Acquire(ctx, leaseKey, 10*time.Second)
	}
	if err != nil {
		nd.env.Logf(nd.name, "could not get the lease: %v", err)
		if ok {
			return servedStale
		}
		return servedNothing
	}
	defer l.Release(context.WithoutCancel(ctx))
	// Look again: the node we waited for may have rebuilt it.
	if value, fresh, ok = nd.read(ctx); ok && fresh {
		nd.env.Logf(nd.name, "got the lease after the rebuild: cache hit: %s", value)
		return servedFresh
	}
	nd.env.Logf(nd.name, "rebuilds the report (fence %d)...", l.Fence())
	othersLooked()
	value, err = nd.rebuild(l.Context(), round)
	if err != nil {
		nd.env.Logf(nd.name, "rebuild failed: %v", err)
		return servedNothing
	}
	nd.env.Logf(nd.name, "rebuilt: %s", value)
	return servedFresh
}

// read returns the cached value and whether it is fresh, by the database
// clock.
func (nd *node) read(ctx context.Context) (value string, fresh, ok bool) {
	err := nd.env.Pool.QueryRow(ctx, `SELECT value, built_at > now() - $2::interval FROM cache_entries WHERE key = $1`,
		cacheKey, freshFor).Scan(&value, &fresh)
	return value, fresh, err == nil
}

func (nd *node) rebuild(ctx context.Context, round int) (string, error) {
	select { // the expensive part
	case <-time.After(rebuildCost):
	case <-ctx.Done():
		return "", context.Cause(ctx)
	}
	var value string
	err := pgx.BeginFunc(ctx, nd.env.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO rebuilds (round, node) VALUES ($1, $2)`, round, nd.name); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `
			INSERT INTO cache_entries AS c (key, value, version, built_at)
			VALUES ($1, 'report v1 (built by ' || $2 || ')', 1, now())
			ON CONFLICT (key) DO UPDATE
			   SET version = c.version + 1, value = 'report v' || (c.version + 1) || ' (built by ' || $2 || ')', built_at = now()
			RETURNING value`, cacheKey, nd.name).Scan(&value)
	})
	return value, err
}

func rebuildCount(ctx context.Context, env *story.Env, round int) (int, error) {
	var n int
	err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM rebuilds WHERE round = $1`, round).Scan(&n)
	env.Note("rebuilds in round %d, read back: %d", round, n)
	return n, err
}
