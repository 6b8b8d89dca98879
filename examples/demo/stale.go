package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pgfence/pgfence/examples/story"
	"github.com/pgfence/pgfence/internal/testsupport/proc"
	"github.com/pgfence/pgfence/pglease"
)

// staleRun is what happened in scene 2 or 3.
type staleRun struct {
	fenced         bool
	fenceA, fenceB int64
	frozeAt        time.Time
	bGranted       time.Time
	aResumed       time.Time
	bSent, aSent   bool
	aCurrent       int64 // the row's fence that refused billing-1, per pgguard
	rowFence       int64
	sends          []sendRow
}

// staleFenced is scene 2: the frozen worker's late write meets the fence.
func staleFenced(ctx context.Context, env *story.Env, v *story.Verdict) error {
	env.Section("2. A worker is frozen past its lease, with the fence at the resource")
	env.Note("billing-1 is a separate process; it is frozen with SIGSTOP for %v, its renewals with it", freeze)
	r, err := staleScene(ctx, env, true)
	if err != nil {
		return err
	}
	env.Note("-> invoices sent: %d; the row's fence is %d", len(r.sends), r.rowFence)
	v.Check(r.fenceB > r.fenceA, "2: the new holder's fence is larger than the frozen one's")
	v.Check(r.bGranted.Before(r.aResumed), "2: billing-2 was granted the lease while billing-1 was frozen")
	v.Check(r.bSent, "2: billing-2's guarded write was accepted")
	v.Check(!r.aSent && r.aCurrent == r.fenceB && r.rowFence == r.fenceB,
		"2: billing-1's late write with its old fence was refused as stale")
	v.Check(len(r.sends) == 1, "2: with the fence, inv_72 was sent once (%d)", len(r.sends))
	return nil
}

// staleUnfenced is scene 3: the same timeline, writes that trust the lock.
func staleUnfenced(ctx context.Context, env *story.Env, v *story.Verdict) error {
	env.Section("3. The same run without the fence: the writes trust the lock")
	r, err := staleScene(ctx, env, false)
	if err != nil {
		return err
	}
	env.Note("-> invoices sent: %d (the customer received %d invoices)", len(r.sends), len(r.sends))
	if len(r.sends) == 2 {
		env.Note("EXPECTED: this is the failure the fence prevents; the lock alone could not")
	}
	v.Check(r.bGranted.Before(r.aResumed) && len(r.sends) == 2 && r.aSent,
		"3: without the fence the same timeline sent inv_72 twice (%d), as expected", len(r.sends))
	return nil
}

// staleScene runs the timeline: billing-1 (a separate process) is granted
// the lease, reads the job, checks its lease, and is frozen just before its
// write; its lease expires by the database clock; billing-2 is granted it
// and sends; billing-1 resumes and writes with its old fence.
func staleScene(ctx context.Context, env *story.Env, fenced bool) (*staleRun, error) {
	if err := resetJob(ctx, env.Pool); err != nil {
		return nil, err
	}
	w, err := startWorker(ctx, env, "billing-1", fenced)
	if err != nil {
		return nil, err
	}
	defer w.kill()
	r := &staleRun{fenced: fenced}
	if err := r.freezeWorker(env, w); err != nil {
		return nil, err
	}
	if err := r.secondHolder(ctx, env); err != nil {
		return nil, err
	}
	if err := r.resumeWorker(ctx, env, w); err != nil {
		return nil, err
	}
	if _, r.rowFence, err = jobRow(ctx, env.Pool); err != nil {
		return nil, err
	}
	r.sends, err = sends(ctx, env.Pool)
	return r, err
}

// freezeWorker follows billing-1 to the moment between checking its lease
// and writing, and freezes it there: the gap between time of check and
// time of use.
func (r *staleRun) freezeWorker(env *story.Env, w *worker) error {
	line, err := w.expect("ACQUIRED")
	if err != nil {
		return err
	}
	r.fenceA, _ = strconv.ParseInt(line, 10, 64)
	env.Logf("billing-1", "pid %d: granted %s, fence %d, TTL %v (auto-renewed every %v)",
		w.cmd.Process.Pid, key, r.fenceA, ttl, (ttl / 3).Round(time.Millisecond))
	if line, err = w.expect("READ"); err != nil {
		return err
	}
	env.Logf("billing-1", "reads inv_72: %s", line)
	if line, err = w.expect("CHECKED"); err != nil {
		return err
	}
	env.Logf("billing-1", "checks its lease before writing: %s", line)
	if err := proc.Stop(w.cmd.Process.Pid, 5*time.Second); err != nil {
		return err
	}
	r.frozeAt = time.Now()
	env.Logf("billing-1", "FROZEN (SIGSTOP) for %v: a GC pause, a VM stall; it cannot renew", freeze)
	_, err = w.stdin.Write([]byte("GO\n")) // buffered in the pipe: read the instant it resumes
	return err
}

// secondHolder is billing-2: it arrives a little later, waits for the key,
// is granted it once billing-1's lease expired, and sends.
func (r *staleRun) secondHolder(ctx context.Context, env *story.Env) error {
	pool, err := env.NewPool(ctx, 3)
	if err != nil {
		return err
	}
	client, err := pglease.New(pool, pglease.WithOwner("billing-2"), pglease.WithMaxWait(3*ttl),
		pglease.WithBackoff(5*time.Millisecond, 40*time.Millisecond))
	if err != nil {
		return err
	}
	defer client.Close()
	time.Sleep(200 * time.Millisecond)
	env.Logf("billing-2", "asks for %s and waits while it is held", key)
	lease, err := client.Acquire(ctx, key, ttl)
	if err != nil {
		return fmt.Errorf("billing-2: %w", err)
	}
	r.fenceB, r.bGranted = lease.Fence(), time.Now()
	env.Logf("billing-2", "granted, fence %d: billing-1's lease expired by the database clock", r.fenceB)
	env.Logf("billing-2", "(fences have gaps: each attempt while waiting drew one; they only ever grow)")
	status, _, err := jobRow(ctx, pool)
	if err != nil {
		return err
	}
	env.Logf("billing-2", "reads inv_72: %s", status)
	o, err := send(ctx, pool, r.fenced, "billing-2", r.fenceB)
	if err != nil {
		return err
	}
	r.bSent = o.sent
	r.logSecondSend(env, o)
	return release(env, "billing-2", lease)
}

func (r *staleRun) logSecondSend(env *story.Env, o outcome) {
	switch {
	case r.fenced && o.sent:
		env.Logf("billing-2", "sends inv_72: guarded write with fence %d accepted", r.fenceB)
	case r.fenced:
		env.Logf("billing-2", "guarded write refused: %v", o.refusal)
	default:
		env.Logf("billing-2", "sends inv_72: unguarded write (sent: %v)", o.sent)
	}
}

// resumeWorker waits out the rest of the freeze, resumes billing-1 and
// reads what became of its late write.
func (r *staleRun) resumeWorker(ctx context.Context, env *story.Env, w *worker) error {
	select {
	case <-time.After(time.Until(r.frozeAt.Add(freeze))):
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := w.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	r.aResumed = time.Now()
	env.Logf("billing-1", "resumes (SIGCONT); its next instruction runs as if no time had passed")
	if err := r.readLateWrite(env, w); err != nil {
		return err
	}
	line, err := w.expect("LOCAL")
	if err != nil {
		return err
	}
	env.Logf("billing-1", "its own lease client now says: %s", line)
	env.Logf("billing-1", "(that local view came too late to stop the write; only the resource can refuse it)")
	_, err = w.expect("DONE")
	return err
}

// readLateWrite parses billing-1's report of its write:
// WROTE <sent> <row fence if refused as stale> [<refusal>].
func (r *staleRun) readLateWrite(env *story.Env, w *worker) error {
	line, err := w.expect("WROTE")
	if err != nil {
		return err
	}
	f := strings.SplitN(line, " ", 3)
	if len(f) < 2 {
		return fmt.Errorf("billing-1: bad report %q", line)
	}
	r.aSent = f[0] == "true"
	r.aCurrent, _ = strconv.ParseInt(f[1], 10, 64)
	refusal := ""
	if len(f) == 3 {
		refusal = f[2]
	}
	switch {
	case r.fenced && !r.aSent:
		env.Logf("billing-1", "sends inv_72 with its old fence %d: REFUSED by the resource", r.fenceA)
		env.Logf("billing-1", "  %s", refusal)
	case r.fenced:
		env.Logf("billing-1", "sends inv_72 with its old fence %d: accepted", r.fenceA)
	case r.aSent:
		env.Logf("billing-1", "sends inv_72 (it read PENDING before the freeze): SENT AGAIN")
	default:
		env.Logf("billing-1", "sends inv_72 (it read PENDING before the freeze): nothing changed")
	}
	return nil
}
