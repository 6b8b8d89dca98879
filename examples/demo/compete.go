package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/examples/story"
	"github.com/pgfence/pgfence/pglease"
)

// competeTTL is the lease of scene 1; ttl is the lease of the stale-writer
// scenes; freeze is how long their worker stays frozen, longer than its
// lease.
const (
	competeTTL = 2 * time.Second
	ttl        = time.Second
	freeze     = 1500 * time.Millisecond
)

// instance is one billing instance of scene 1: its own pool and lease
// client, as a separate service would have.
type instance struct {
	name    string
	pool    *pgxpool.Pool
	client  *pglease.Client
	granted bool
	skipped bool
	err     error
}

// compete is scene 1: three instances notice inv_72 is due at once.
func compete(ctx context.Context, env *story.Env, v *story.Verdict) error {
	env.Section("1. Every minute, three billing instances notice that invoice inv_72 is due")
	if err := resetJob(ctx, env.Pool); err != nil {
		return err
	}
	instances := make([]*instance, 3)
	for i := range instances {
		in, err := newInstance(ctx, env, fmt.Sprintf("billing-%d", i+1))
		if err != nil {
			return err
		}
		defer in.client.Close()
		instances[i] = in
	}
	startLine := make(chan struct{})
	var wg sync.WaitGroup
	for _, in := range instances {
		wg.Go(func() {
			<-startLine
			in.err = in.tick(ctx, env)
		})
	}
	close(startLine)
	wg.Wait()
	return judgeCompete(ctx, env, v, instances)
}

func newInstance(ctx context.Context, env *story.Env, name string) (*instance, error) {
	pool, err := env.NewPool(ctx, 3)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		return nil, err
	}
	client, err := pglease.New(pool, pglease.WithOwner(name))
	if err != nil {
		return nil, err
	}
	return &instance{name: name, pool: pool, client: client}, nil
}

// tick is what an instance does when the invoice is due: take the lease or
// skip, send with the fence, release.
func (in *instance) tick(ctx context.Context, env *story.Env) error {
	env.Logf(in.name, "asks for %s (TTL %v)", key, competeTTL)
	lease, err := in.client.TryAcquire(ctx, key, competeTTL)
	if errors.Is(err, pgfence.ErrNotAcquired) {
		in.skipped = true
		env.Logf(in.name, "refused: another instance holds it; skips this tick")
		return nil
	}
	if err != nil {
		return err
	}
	in.granted = true
	env.Logf(in.name, "granted, fence %d; renders the invoice (300ms)", lease.Fence())
	time.Sleep(300 * time.Millisecond)
	o, err := send(ctx, in.pool, true, in.name, lease.Fence())
	if err != nil {
		return err
	}
	if o.sent {
		env.Logf(in.name, "sends inv_72: guarded write with fence %d accepted", lease.Fence())
	} else {
		env.Logf(in.name, "guarded write refused: %v", o.refusal)
	}
	return release(env, in.name, lease)
}

// release gives a lease back, even when the example's context has ended.
func release(env *story.Env, who string, lease *pglease.Lease) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := lease.Release(ctx); err != nil {
		return fmt.Errorf("%s: %w", who, err)
	}
	env.Logf(who, "releases the lease")
	return nil
}

// judgeCompete checks scene 1 against what the database holds.
func judgeCompete(ctx context.Context, env *story.Env, v *story.Verdict, instances []*instance) error {
	granted, skipped := 0, 0
	for _, in := range instances {
		if in.err != nil {
			return fmt.Errorf("%s: %w", in.name, in.err)
		}
		if in.granted {
			granted++
		}
		if in.skipped {
			skipped++
		}
	}
	s, err := sends(ctx, env.Pool)
	if err != nil {
		return err
	}
	env.Note("-> invoices sent: %d; lease grants: %d; instances that skipped: %d", len(s), granted, skipped)
	v.Check(granted == 1 && skipped == 2, "1: of three instances, %d was granted the lease and %d skipped", granted, skipped)
	v.Check(len(s) == 1, "1: inv_72 was sent once (%d)", len(s))
	return nil
}
