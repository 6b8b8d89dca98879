package claim

import (
	"context"
	"sync"
	"time"
)

// renewer keeps the leases of a Runner's jobs alive with one goroutine and one
// renew statement per round for all of them, instead of a goroutine and
// a statement per job. Each job also gets a timer (no goroutine until it
// fires) that ends its context at its local deadline; a successful
// renewal moves that timer.
type renewer struct {
	c     *Claimer
	ttl   time.Duration
	every time.Duration // a job is renewed once this long has passed since its last success
	tick  time.Duration // how often the renewer looks for due jobs

	mu   sync.Mutex
	jobs map[*Job]*renewed
}

type renewed struct {
	cancel   context.CancelCauseFunc
	deadline *time.Timer // ends the job's context at its local deadline
	due      time.Time   // next renewal
	lost     bool        // the lease is gone: no more renewals
}

func newRenewer(c *Claimer, ttl time.Duration) *renewer {
	return &renewer{
		c: c, ttl: ttl, every: ttl / 3,
		// Looking every sixth of the TTL renews a job between a
		// third and a half of its TTL after the last success, well
		// before its local deadline at nine tenths.
		tick: max(ttl/6, time.Millisecond),
		jobs: map[*Job]*renewed{},
	}
}

// add starts keeping j's lease; cancel ends j's context with a
// *LeaseLostError when its lease is lost or its local deadline passes.
func (r *renewer) add(j *Job, cancel context.CancelCauseFunc) {
	e := &renewed{cancel: cancel, due: time.Now().Add(r.every)}
	e.deadline = time.AfterFunc(time.Until(j.Deadline()), func() {
		cancel(&LeaseLostError{Op: "local deadline", JobID: j.ID, Fence: j.Fence})
	})
	r.mu.Lock()
	r.jobs[j] = e
	r.mu.Unlock()
}

// remove stops keeping j's lease: its result was recorded.
func (r *renewer) remove(j *Job) {
	r.mu.Lock()
	if e, ok := r.jobs[j]; ok {
		e.deadline.Stop()
		delete(r.jobs, j)
	}
	r.mu.Unlock()
}

// run renews due jobs until stop is closed.
func (r *renewer) run(stop <-chan struct{}) {
	t := time.NewTicker(r.tick)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if due := r.due(time.Now()); len(due) > 0 {
			r.renew(due)
		}
	}
}

func (r *renewer) due(now time.Time) []*Job {
	r.mu.Lock()
	defer r.mu.Unlock()
	var due []*Job
	for j, e := range r.jobs {
		if !e.lost && !e.due.After(now) {
			due = append(due, j)
		}
	}
	return due
}

func (r *renewer) renew(jobs []*Job) {
	sent := time.Now()
	// A renewal that hangs must not hold up the next round: the jobs'
	// deadline timers fire on their own meanwhile.
	ctx, cancel := context.WithTimeout(context.Background(), r.every)
	lost, err := r.c.renewMany(ctx, jobs, r.ttl)
	cancel()
	if err != nil {
		// Transient: the leases hold until their local deadlines; the
		// next round tries again.
		r.c.cfg.logger.Warn("claim: renewal failed; retrying", "jobs", len(jobs), "err", err)
		return
	}
	isLost := make(map[*Job]bool, len(lost))
	for _, j := range lost {
		isLost[j] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, j := range jobs {
		e, ok := r.jobs[j]
		if !ok {
			continue // its result was recorded meanwhile
		}
		if isLost[j] {
			e.lost = true
			e.cancel(&LeaseLostError{Op: "renew", JobID: j.ID, Fence: j.Fence})
			continue
		}
		e.due = sent.Add(r.every)
		e.deadline.Reset(time.Until(j.Deadline()))
	}
}
