package claim

import (
	"context"
	"time"

	"github.com/pgfence/pgfence/internal/keepalive"
)

// schedule is how a job lease of TTL ttl is kept alive: package keepalive's
// defaults, as pglease's (local deadline TTL − TTL/10, renewal every TTL/3).
func schedule(ttl time.Duration) keepalive.Schedule { return keepalive.Schedule{TTL: ttl} }

// renewer keeps the leases of a Runner's jobs alive with one goroutine and one
// renew statement per round for all of them (a keepalive.Keeper), instead of
// a goroutine and a statement per job.
type renewer struct {
	k *keepalive.Keeper[*Job]
}

func newRenewer(c *Claimer, ttl time.Duration) *renewer {
	return &renewer{k: keepalive.NewKeeper(schedule(ttl), func(ctx context.Context, jobs []*Job) ([]*Job, error) {
		lost, err := c.renewMany(ctx, jobs, ttl)
		if err != nil {
			c.cfg.logger.Warn("claim: renewal failed; retrying until the local deadline", "jobs", len(jobs), "err", err)
		}
		return lost, err
	})}
}

// add starts keeping j's lease; cancel ends j's context with a
// *pgfence.LeaseLostError when its lease is lost or its local deadline passes.
func (r *renewer) add(j *Job, cancel context.CancelCauseFunc) {
	r.k.Add(j, func(cause keepalive.Cause) { cancel(lostBy(cause, j)) })
}

// remove stops keeping j's lease: its result was recorded.
func (r *renewer) remove(j *Job) { r.k.Remove(j) }

// run renews due jobs until stop is closed.
func (r *renewer) run(stop <-chan struct{}) { r.k.Run(stop) }
