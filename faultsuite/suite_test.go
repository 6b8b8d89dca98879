package faultsuite

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/faultsuite/internal/worker"
	"github.com/pgfence/pgfence/internal/testsupport/dbenv"
	"github.com/pgfence/pgfence/internal/testsupport/faultproxy"
	"github.com/pgfence/pgfence/internal/testsupport/proc"
)

// Workload and fault parameters. The short run (part of go test) lasts
// shortRun; PGFENCE_SOAK=<duration> runs the fenced workload that long.
const (
	workers       = 4
	keys          = 2
	jobs          = 400
	ttl           = time.Second
	writesPerHold = 8
	shortRun      = 30 * time.Second
	controlRun    = 12 * time.Second
)

// config is one run of the workload.
type config struct {
	unfenced bool
	duration time.Duration
}

// harness is one run: its database, proxy, workers and recorded history.
type harness struct {
	t       *testing.T
	cfg     config
	cl      *dbenv.Cluster
	pool    *pgxpool.Pool // direct, not through the proxy: the injector's and the reader's
	proxy   *faultproxy.Chaos
	workers []*workerProc
	mu      sync.Mutex
	reads   []porcupine.Operation
	faults  map[string]int
}

type workerProc struct {
	id      int
	cmd     *exec.Cmd
	mu      sync.Mutex
	records []worker.Record
	stderr  bytes.Buffer
	done    chan struct{} // closed when stdout is drained
}

const (
	rowsTable    = "fs_rows"
	effectsTable = "fs_effects"
)

func newHarness(t *testing.T, cfg config) *harness {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := theCluster(t)
	dbURL, drop, err := dbenv.CreateDatabase(ctx, cl.URL("postgres"), "faultsuite_")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drop)
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	for _, ddl := range []string{fmt.Sprintf(worker.RowsDDL, rowsTable), fmt.Sprintf(worker.EffectsDDL, effectsTable)} {
		if _, err := pool.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	if err := installLeaseAudit(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := installRegisterAudit(ctx, pool); err != nil {
		t.Fatal(err)
	}
	for k := range keys {
		if _, err := pool.Exec(ctx, `INSERT INTO fs_rows (k) VALUES ($1)`, fmt.Sprintf("k%d", k)); err != nil {
			t.Fatal(err)
		}
	}
	queue, err := claim.New(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	for range jobs {
		if _, err := queue.Enqueue(ctx, pool, claim.NewJob{MaxAttempts: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(cl.SockDir, fmt.Sprintf(".s.PGSQL.%d", cl.Port))
	proxy, err := faultproxy.NewChaos(func() (net.Conn, error) { return net.DialTimeout("unix", sock, 2*time.Second) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	h := &harness{t: t, cfg: cfg, cl: cl, pool: pool, proxy: proxy, faults: map[string]int{}}
	u, _ := url.Parse(dbURL)
	workerDSN := fmt.Sprintf("postgres://postgres@127.0.0.1:%d%s?sslmode=disable", proxy.Port(), u.Path)
	for id := range workers {
		h.startWorker(id, workerDSN)
	}
	return h
}

func (h *harness) startWorker(id int, dsn string) {
	self, err := os.Executable()
	if err != nil {
		h.t.Fatal(err)
	}
	w := &workerProc{id: id, done: make(chan struct{})}
	w.cmd = exec.Command(self, "-test.run=^$")
	unfenced := "0"
	if h.cfg.unfenced {
		unfenced = "1"
	}
	w.cmd.Env = append(os.Environ(),
		worker.EnvID+"="+strconv.Itoa(id), worker.EnvDSN+"="+dsn, worker.EnvUnfenced+"="+unfenced,
		worker.EnvKeys+"="+strconv.Itoa(keys), worker.EnvTTL+"="+ttl.String(),
		worker.EnvRows+"="+rowsTable, worker.EnvEffects+"="+effectsTable,
		worker.EnvWrites+"="+strconv.Itoa(writesPerHold))
	w.cmd.Stderr = &w.stderr
	out, err := w.cmd.StdoutPipe()
	if err != nil {
		h.t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var r worker.Record
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				continue // a line cut by a kill
			}
			w.mu.Lock()
			w.records = append(w.records, r)
			w.mu.Unlock()
		}
	}()
	h.workers = append(h.workers, w)
}

// run drives the workload for the configured time with faults, then stops
// the workers and takes the final reads.
func (h *harness) run() {
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.duration)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); h.readLoop(ctx) }()
	go func() { defer wg.Done(); h.rescueLoop(ctx) }()
	go func() { defer wg.Done(); h.injectLoop(ctx) }()
	wg.Wait()
	h.proxy.Heal()
	h.proxy.Delay(0)
	for _, w := range h.workers {
		w.cmd.Process.Signal(syscall.SIGCONT)
		w.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, w := range h.workers {
		select {
		case <-w.done:
		case <-time.After(20 * time.Second):
			w.cmd.Process.Kill() // its open calls count as ambiguous
			<-w.done
		}
		w.cmd.Wait()
	}
	// Let every late write land (a held request was delivered at Heal) and
	// wait out the leases, then read each row's final value.
	time.Sleep(ttl) // the point: leases expire by the database clock; nothing signals a late write
	fctx, fcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer fcancel()
	for k := range keys {
		if !h.read(fctx, fmt.Sprintf("k%d", k)) {
			h.t.Fatalf("final read of k%d failed", k)
		}
	}
}

// readLoop reads each row every 30ms directly from the server; a failed read
// (the server is restarting) is left out of the history.
func (h *harness) readLoop(ctx context.Context) {
	for ctx.Err() == nil {
		for k := range keys {
			h.read(ctx, fmt.Sprintf("k%d", k))
		}
		time.Sleep(30 * time.Millisecond) // the reading cadence
	}
}

func (h *harness) read(ctx context.Context, key string) bool {
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	call := time.Now().UnixNano()
	var s regState
	err := h.pool.QueryRow(rctx, `SELECT val, last_fence FROM fs_rows WHERE k = $1`, key).Scan(&s.Val, &s.Fence)
	ret := time.Now().UnixNano()
	if err != nil {
		return false
	}
	h.mu.Lock()
	h.reads = append(h.reads, porcupine.Operation{ClientId: workers, Call: call, Return: ret,
		Input: regInput{Row: key, Read: true}, Output: regOutput{State: s}})
	h.mu.Unlock()
	return true
}

// rescueLoop returns expired jobs to the queue, as a deployment's pool
// does, and keeps the queue fed so that a soak never runs out of jobs.
func (h *harness) rescueLoop(ctx context.Context) {
	c, err := claim.New(ctx, h.pool, claim.WithOwner("fs-rescuer"))
	if err != nil {
		h.t.Error(err)
		return
	}
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		c.Rescue(rctx, 100)
		var available int
		if h.pool.QueryRow(rctx, `SELECT count(*) FROM pgfence_jobs WHERE state = 'available'`).Scan(&available) == nil {
			for range max(0, jobs/4-available) {
				if _, err := c.Enqueue(rctx, h.pool, claim.NewJob{MaxAttempts: 1000}); err != nil {
					break
				}
			}
		}
		cancel()
		time.Sleep(200 * time.Millisecond) // a rescuer's cadence, as a deployment's pool has
	}
}

// injectLoop injects one fault after another. Every other fault freezes a
// lease holder past its TTL, the fault fencing exists for, so a run of any
// length has the stale writers the control run must be caught by; the
// others are drawn at random.
func (h *harness) injectLoop(ctx context.Context) {
	others := []func(context.Context) string{h.terminate, h.blackhole, h.cut, h.delay, h.crash}
	for i := 0; ; i++ {
		if !sleepCtx(ctx, time.Duration(200+rand.IntN(400))*time.Millisecond) {
			return
		}
		var kind string
		if i%2 == 0 {
			kind = h.stopHolder(ctx)
		} else {
			kind = others[rand.IntN(len(others))](ctx)
		}
		h.faults[kind]++
	}
}

// stopHolder freezes a worker that holds a lease (any worker if none does)
// until its lease has expired by the database clock, then resumes it.
func (h *harness) stopHolder(ctx context.Context) string {
	w := h.workers[rand.IntN(len(h.workers))]
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	var owner string
	err := h.pool.QueryRow(qctx, `SELECT owner FROM lock_leases WHERE expires_at > now() ORDER BY random() LIMIT 1`).Scan(&owner)
	cancel()
	if id, ok := strings.CutPrefix(owner, "fsworker-"); err == nil && ok {
		if n, err := strconv.Atoi(id); err == nil && n < len(h.workers) {
			w = h.workers[n]
		}
	}
	if err := proc.Stop(w.cmd.Process.Pid, 5*time.Second); err != nil {
		h.t.Errorf("freeze worker %d: %v", w.id, err)
	}
	time.Sleep(ttl + 700*time.Millisecond) // not cut short: a frozen worker must be resumed
	w.cmd.Process.Signal(syscall.SIGCONT)
	return "sigstop past ttl"
}

func (h *harness) terminate(ctx context.Context) string {
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	h.pool.Exec(qctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`,
		fmt.Sprintf("fsworker-%d", rand.IntN(workers)))
	return "pg_terminate_backend"
}

func (h *harness) blackhole(ctx context.Context) string {
	h.proxy.Blackhole()
	sleepCtx(ctx, time.Duration(500+rand.IntN(2000))*time.Millisecond)
	h.proxy.Heal()
	return "blackhole"
}

func (h *harness) cut(context.Context) string {
	h.proxy.Cut()
	return "connection cut"
}

func (h *harness) delay(ctx context.Context) string {
	h.proxy.Delay(time.Duration(20+rand.IntN(200)) * time.Millisecond)
	sleepCtx(ctx, 1500*time.Millisecond)
	h.proxy.Delay(0)
	return "delay"
}

// crash kills the postmaster with SIGKILL and starts the server again.
func (h *harness) crash(context.Context) string {
	h.cl.Kill(syscall.SIGKILL)
	var err error
	for try := 0; try < 20; try++ {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = h.cl.Start(sctx, nil)
		cancel()
		if err == nil {
			return "server crash-restart"
		}
		time.Sleep(250 * time.Millisecond) // retry backoff: a start right after SIGKILL may fail
	}
	h.t.Errorf("server does not start again after a crash: %v", err) // not Fatal: this is not the test's goroutine
	return "server crash-restart (no restart)"
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// verdict is what the checks found.
type verdict struct {
	register    porcupine.CheckResult
	info        porcupine.LinearizationInfo
	violations  []string // from the direct checks
	ops         map[string]int
	leaseGrants int // grants the lease audit checked for mutual exclusion
	rowUpdates  int // row updates the register audit checked for falling fences
}

// history turns the workers' records into register operations, lease
// grants and job completions.
func (h *harness) history() (regOps []porcupine.Operation, grants []grant, completes []completion, counts map[string]int) {
	counts = map[string]int{}
	for _, w := range h.workers {
		calls := map[int64]worker.Record{}
		rets := map[int64]worker.Record{}
		for _, r := range w.records {
			if r.Phase == "call" {
				calls[r.Seq] = r
			} else {
				rets[r.Seq] = r
			}
		}
		for seq, c := range calls {
			r, answered := rets[seq]
			out := worker.Ambiguous
			retT := int64(never)
			if answered {
				out = r.Out
				if out != worker.Ambiguous {
					retT = r.T
				}
			}
			counts[c.Op+" "+out]++
			switch c.Op {
			case worker.OpWrite:
				if out == worker.Failed {
					continue
				}
				regOps = append(regOps, porcupine.Operation{ClientId: w.id, Call: c.T, Return: retT,
					Input: regInput{Row: c.Key, Val: c.Val, Fence: c.Fence}, Output: regOutput{Out: out}})
			case worker.OpAcquire:
				if out == worker.OK {
					grants = append(grants, grant{key: c.Key, fence: r.Fence, call: c.T, ret: r.T, worker: w.id})
				}
			case worker.OpComplete:
				completes = append(completes, completion{job: c.Job, fence: c.Fence, out: out, worker: w.id, err: r.Err})
			}
		}
	}
	h.mu.Lock()
	regOps = append(regOps, h.reads...)
	counts["read ok"] = len(h.reads)
	h.mu.Unlock()
	return regOps, grants, completes, counts
}

type grant struct {
	key       string
	fence     int64
	call, ret int64
	worker    int
}

type completion struct {
	job, fence int64
	out        string
	worker     int
	err        string // the error the worker was given, if any
}

func (h *harness) check(timeout time.Duration) verdict {
	regOps, grants, completes, counts := h.history()
	v := verdict{ops: counts}
	v.register, v.info = checkRegister(regOps, timeout)
	v.violations = append(v.violations, checkGrants(grants)...)
	for _, c := range completes {
		if c.out == worker.Failed && testing.Verbose() {
			h.t.Logf("job %d: completion by worker %d failed: %s", c.job, c.worker, c.err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	jv, err := h.checkJobs(ctx, completes)
	if err != nil {
		h.t.Fatal(err)
	}
	v.violations = append(v.violations, jv...)
	n, lv, err := checkLeaseAudit(ctx, h.pool)
	if err != nil {
		h.t.Fatal(err)
	}
	v.leaseGrants = n
	v.violations = append(v.violations, lv...)
	n, rv, err := checkRegisterAudit(ctx, h.pool)
	if err != nil {
		h.t.Fatal(err)
	}
	v.rowUpdates = n
	v.violations = append(v.violations, rv...)
	return v
}

// checkGrants: per key, fences are unique, and a grant asked for after
// another was answered carries a higher fence.
func checkGrants(grants []grant) []string {
	var out []string
	seen := map[int64]grant{}
	byKey := map[string][]grant{}
	for _, g := range grants {
		if o, dup := seen[g.fence]; dup {
			out = append(out, fmt.Sprintf("fence %d granted twice (workers %d and %d)", g.fence, o.worker, g.worker))
		}
		seen[g.fence] = g
		byKey[g.key] = append(byKey[g.key], g)
	}
	for key, gs := range byKey {
		byCall := append([]grant(nil), gs...)
		sort.Slice(byCall, func(i, j int) bool { return byCall[i].call < byCall[j].call })
		byRet := append([]grant(nil), gs...)
		sort.Slice(byRet, func(i, j int) bool { return byRet[i].ret < byRet[j].ret })
		var maxDone grant
		i := 0
		for _, g := range byCall {
			for ; i < len(byRet) && byRet[i].ret < g.call; i++ {
				if byRet[i].fence > maxDone.fence {
					maxDone = byRet[i]
				}
			}
			if maxDone.fence != 0 && g.fence <= maxDone.fence {
				out = append(out, fmt.Sprintf("%s: fence went down: grant %d to worker %d asked after grant %d to worker %d was answered",
					key, g.fence, g.worker, maxDone.fence, maxDone.worker))
			}
		}
	}
	return out
}

// checkJobs compares the completions the workers were told about with the
// database: every acknowledged completion is there with its effect, no job
// has two effects, a refused completion left no effect, and a completed job
// has exactly the effect of the claim that completed it.
func (h *harness) checkJobs(ctx context.Context, completes []completion) ([]string, error) {
	type effect struct{ job, fence int64 }
	effects := map[effect]int{}
	perJob := map[int64]int{}
	writers := map[int64][]string{} // per job: "fence by worker", for the messages
	rows, err := h.pool.Query(ctx, `SELECT job_id, fence, worker FROM fs_effects`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var e effect
		var w int
		if err := rows.Scan(&e.job, &e.fence, &w); err != nil {
			return nil, err
		}
		writers[e.job] = append(writers[e.job], fmt.Sprintf("fence %d by worker %d", e.fence, w))
		effects[e]++
		perJob[e.job]++
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	state := map[int64]string{}
	fence := map[int64]int64{}
	rows, err = h.pool.Query(ctx, `SELECT id, state, coalesce(fence, 0) FROM pgfence_jobs`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id, f int64
		var s string
		if err := rows.Scan(&id, &s, &f); err != nil {
			return nil, err
		}
		state[id], fence[id] = s, f
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var out []string
	for _, c := range completes {
		e := effect{c.job, c.fence}
		switch c.out {
		case worker.OK:
			if state[c.job] != "completed" || effects[e] == 0 {
				out = append(out, fmt.Sprintf("job %d: completion acknowledged to worker %d (fence %d) is lost: state %s, effects %d",
					c.job, c.worker, c.fence, state[c.job], effects[e]))
			}
		case worker.Refused, worker.Failed:
			if effects[e] != 0 {
				out = append(out, fmt.Sprintf("job %d: completion reported %s to worker %d (fence %d) left an effect (error: %s; effects: %v)",
					c.job, c.out, c.worker, c.fence, c.err, writers[c.job]))
			}
		}
	}
	ids := make([]int64, 0, len(state))
	for id := range state {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		n := perJob[id]
		switch {
		case n > 1:
			out = append(out, fmt.Sprintf("job %d: effect applied %d times: %v", id, n, writers[id]))
		case state[id] == "completed" && (n != 1 || effects[effect{id, fence[id]}] != 1):
			out = append(out, fmt.Sprintf("job %d: completed under fence %d but its effects are %d (%d under that fence)",
				id, fence[id], n, effects[effect{id, fence[id]}]))
		case state[id] != "completed" && n > 0:
			out = append(out, fmt.Sprintf("job %d: effect applied but the job is %s", id, state[id]))
		}
	}
	return out, nil
}

// report writes the run's figures to the test log.
func (h *harness) report(v verdict) {
	h.t.Helper()
	total := 0
	var ops []string
	for k, n := range v.ops {
		total += n
		ops = append(ops, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(ops)
	faults, nf := []string{}, 0
	for k, n := range h.faults {
		nf += n
		faults = append(faults, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(faults)
	h.t.Logf("%d operations (%s)", total, strings.Join(ops, ", "))
	h.t.Logf("%d faults injected (%s)", nf, strings.Join(faults, ", "))
	h.t.Logf("lease audit: %d grants checked for mutual exclusion (database row versions)", v.leaseGrants)
	h.t.Logf("register audit: %d row updates checked for a falling fence (database row versions)", v.rowUpdates)
	h.t.Logf("register check: %s; direct-check violations: %d", v.register, len(v.violations))
	for i, s := range v.violations {
		if i == 20 {
			h.t.Logf("... and %d more", len(v.violations)-20)
			break
		}
		h.t.Logf("violation: %s", s)
	}
}

// dumpIllegal writes porcupine's visualization of a failed check next to
// the test's temp files and says where.
func (h *harness) dumpIllegal(v verdict) {
	path := filepath.Join(os.TempDir(), fmt.Sprintf("faultsuite-%d.html", time.Now().UnixNano()))
	if err := porcupine.VisualizePath(fencedRegister.ToModel(), v.info, path); err == nil {
		h.t.Logf("porcupine's view of the history: %s", path)
	}
}

func soakDuration(t *testing.T) time.Duration {
	s := os.Getenv("PGFENCE_SOAK")
	if s == "" {
		return shortRun
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("PGFENCE_SOAK=%q: want a duration such as 10m", s)
	}
	return d
}

// The fenced workload under every fault: the history must check out.
func TestFencedUnderFaults(t *testing.T) {
	d := soakDuration(t)
	h := newHarness(t, config{duration: d})
	h.run()
	v := h.check(d + time.Minute)
	h.report(v)
	switch v.register {
	case porcupine.Ok:
	case porcupine.Illegal:
		h.dumpIllegal(v)
		t.Error("the fenced rows' history is not linearizable as a fenced register: a stale write was accepted, or an acknowledged one lost")
	default:
		t.Errorf("the register check was inconclusive (%s): the history was too large for the time allowed", v.register)
	}
	if len(v.violations) > 0 {
		t.Errorf("%d violations in the lease and job history (listed above)", len(v.violations))
	}
	if v.leaseGrants == 0 {
		t.Error("the lease audit checked no grant: mutual exclusion went unchecked")
	}
	if v.rowUpdates == 0 {
		t.Error("the register audit checked no row update: applied fences went unchecked")
	}
	checkLeaseAuditBites(t, h.pool)
	checkRegisterAuditBites(t, h.pool)
	for _, w := range h.workers {
		if s := w.stderr.String(); strings.Contains(s, "panic") || strings.Contains(s, "DATA RACE") {
			t.Errorf("worker %d: %s", w.id, s)
		}
	}
}

// The same workload without the fence: the checker must flag it, or it
// proves nothing.
func TestUnfencedControlIsFlagged(t *testing.T) {
	h := newHarness(t, config{unfenced: true, duration: controlRun})
	h.run()
	v := h.check(time.Minute)
	h.report(v)
	if v.register != porcupine.Illegal {
		t.Errorf("the checker did not flag the unfenced writes (register check: %s)", v.register)
	}
}
