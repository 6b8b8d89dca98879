package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// report collects every section's figures and renders BENCHMARKS.md: the
// machine once, then one section per workload with what it measures, the
// latest run's medians and ranges, its goal, the command and a plot.
type report struct {
	opts     *options
	machine  machine
	pg       pgServer
	fsync    string
	failures int

	leases  []*leaseRow
	handoff []*handoffRow
	coord   []*coordRow
	jobs    []*jobRow
	bouncer []*bouncerRow
	scale   []scaleRow
	memory  *memResult

	bouncerSkip    string // why the PgBouncer section did not run
	bouncerVersion string

	scaleAcquireRatio float64
	sweepP99          time.Duration
	purgeP99          time.Duration
	scaleNote         string
}

// printer writes one line of Markdown.
type printer func(format string, args ...any)

func (r *report) markdown() (string, error) {
	var b strings.Builder
	p := printer(func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) })
	p("# Benchmarks")
	p("")
	if r.opts.smoke {
		p("**Smoke run** (CI): tiny sizes, one short round; it checks that every contender works. The figures mean nothing.")
		p("")
	}
	p("pgfence and its peers, side by side in one process (`bench/`, a Go module of its own, so the peers never enter the library's module graph). In every round the contenders take turns, the first one rotating from round to round, so that a slow spell of the machine does not fall on one contender. Tables give the **median (min–max) over %d rounds**; a ratio is the median of the per-round ratios. Regenerate this page with:", r.opts.rounds)
	p("")
	p("```")
	p("%s", r.opts.command)
	p("```")
	r.machineSection(p)
	for _, s := range []func(printer) error{
		r.leaseSection, r.redisSection, r.coordSection, r.handoffSection, r.jobSection, r.bouncerSection,
		r.scaleSection, r.memorySection,
	} {
		if err := s(p); err != nil {
			return "", err
		}
	}
	return b.String(), nil
}

func (r *report) machineSection(p printer) {
	p("")
	p("## Machine and PostgreSQL")
	p("")
	m := r.machine
	p("- Client and server on one machine, over loopback: %d cores (%s), %s memory, %s, %s.", m.cpus, m.cpuModel, m.memory, m.goVersion, m.os)
	tls := "without TLS"
	if r.pg.tls {
		tls = "over TLS"
	}
	p("- Server: %s; the benchmark's connections %s.", r.pg.version, tls)
	var set []string
	for _, s := range r.pg.settings {
		set = append(set, fmt.Sprintf("%s=%s", s[0], s[1]))
	}
	p("- Settings: %s.", strings.Join(set, ", "))
	p("- Sizes: %v per contender's turn (lease workloads); %s jobs inserted up front per job run; %s keys; hand-off with %d waiters; %s rows for the scale section; %s held leases for memory.",
		r.opts.duration, num(float64(r.opts.jobs)), num(float64(r.opts.keys)), r.opts.waiters, num(float64(r.opts.scaleRows)), num(float64(r.opts.held)))
	if r.fsync != "" {
		if ops := r.flushesPerSecond(); ops > 0 {
			p("- One durable commit waits for one WAL flush: `pg_test_fsync` gives %s flushes/s (%.0f µs each) with the server's wal_sync_method; commits that wait together share a flush (group commit).", num(ops), 1e6/ops)
		}
		p("")
		p("```")
		p("%s", r.fsync)
		p("```")
	}
}

// flushesPerSecond parses pg_test_fsync's line for the server's
// wal_sync_method (0 if absent).
func (r *report) flushesPerSecond() float64 {
	method := "fdatasync"
	for _, s := range r.pg.settings {
		if s[0] == "wal_sync_method" {
			method = s[1]
		}
	}
	for _, l := range strings.Split(r.fsync, "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 && f[0] == method && f[2] == "ops/sec" {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return 0
}

// sectionCommand is the command that reruns one section alone, with the
// flags that shape it.
func (r *report) sectionCommand(section string, flags ...string) string {
	o := r.opts
	vals := map[string]string{
		"clients": joinInts(o.clients), "workers": joinInts(o.workers), "duration": o.duration.String(),
		"rounds": fmt.Sprint(o.rounds), "jobs": fmt.Sprint(o.jobs), "keys": fmt.Sprint(o.keys),
		"waiters": fmt.Sprint(o.waiters), "scale-rows": fmt.Sprint(o.scaleRows), "held": fmt.Sprint(o.held),
	}
	cmd := "cd bench && go run . -only " + section
	for _, f := range append(flags, "rounds") {
		cmd += " -" + f + " " + vals[f]
	}
	if o.smoke {
		cmd += " -smoke"
	}
	return cmd + " -out /tmp/" + section + ".md"
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

// footer writes a section's command and its plot.
func (r *report) footer(p printer, cmd, plotName, alt string) {
	p("")
	p("Command: `%s`", cmd)
	if plotName != "" {
		p("")
		p("![%s](%s)", alt, r.plotLink(plotName))
	}
}

// goal writes one goal line: met or missed, and why when missed.
func goal(p printer, ok bool, what, why string) {
	if ok {
		p("- Goal %s: **met**.", what)
		return
	}
	if why == "" {
		p("- Goal %s: **missed**.", what)
		return
	}
	p("- Goal %s: **missed**. %s", what, why)
}

// plotPath is where plot name is written; plotLink is how the page links it.
func (r *report) plotPath(name string) string { return filepath.Join(r.opts.plots, name+".png") }

func (r *report) plotLink(name string) string {
	rel, err := filepath.Rel(filepath.Dir(absPath(r.opts.out)), absPath(r.plotPath(name)))
	if err != nil {
		return r.plotPath(name)
	}
	return filepath.ToSlash(rel)
}

func absPath(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}

// cell is a contender's figure, or why it has none.
func cell(rates map[string]sample, status map[string]string, name string) string {
	if s := status[name]; s != "" {
		s = strings.Join(strings.Fields(strings.ReplaceAll(s, "|", "/")), " ")
		if len(s) > 160 {
			s = s[:160] + "…"
		}
		return s
	}
	return rates[name].rate()
}

// ceilingVerdict says whether pgfence's and the raw statements' rates come
// near the flush ceiling of their client count.
func (r *report) ceilingVerdict(flushes float64) string {
	worst := 0.0 // the highest share of its ceiling any of them reached
	for _, row := range r.leases {
		for _, n := range []string{cPgfence, cRaw} {
			if s := row.rates[n]; len(s) > 0 {
				worst = max(worst, s.median()/(float64(row.clients)*flushes))
			}
		}
	}
	if worst > 1 {
		return fmt.Sprintf("pgfence or the raw statements went above it (to %.0f%% of it), so the disk flushed faster during their turns than during `pg_test_fsync`'s run, whose one reading is no firm ceiling on a machine whose disk other work shares.", 100*worst)
	}
	if worst < 0.5 {
		return fmt.Sprintf("pgfence and the raw statements reach at most %.0f%% of their client count's ceiling here, so the round trips and the server's CPU per statement bound their rates, not the disk.", 100*worst)
	}
	return fmt.Sprintf("pgfence or the raw statements reach %.0f%% of their client count's ceiling here: the disk's flush rate is what bounds them.", 100*worst)
}

// onePairBound explains the one-client ratio: each pair is two statements,
// so two round trips, and the raw pair waits for two flushes where pgfence's
// waits for one (its release commits asynchronously). From the raw rate and
// the flush time it derives the round trip and the best pgfence can do.
func onePairBound(row *leaseRow, flushes float64) string {
	raw := row.rates[cRaw]
	if len(raw) == 0 || flushes <= 0 {
		return "Each pair is two statements, two round trips, whatever the flush."
	}
	f := 1 / flushes
	tRaw := 1 / raw.median()
	rt := (tRaw - 2*f) / 2
	if rt <= 0 {
		return "Each pair is two statements, two round trips, whatever the flush."
	}
	return fmt.Sprintf("A pair is two statements, so two round trips, either way: the raw pair took %.0f µs, two flushes of %.0f µs and two statements of %.0f µs each (round trip and server time). pgfence saves one flush (its release commits asynchronously), so with statements as cheap as the raw ones it could reach %.0f µs per pair, %.2f× the raw rate: %.1f× would need fewer round trips per pair, not a cheaper statement.",
		tRaw*1e6, f*1e6, rt*1e6, (2*rt+f)*1e6, tRaw/(2*rt+f), leaseGoal(1))
}

// leaseGoal is the acquire + release target against the raw statements at
// a client count (10,000-keys workload).
func leaseGoal(clients int) float64 {
	if clients == 1 {
		return 1.8
	}
	return 1.5
}

func (r *report) leaseSection(p printer) error {
	if len(r.leases) == 0 {
		return nil
	}
	p("")
	p("## Leases: acquire + release pairs per second")
	p("")
	p("Each client loops: acquire a key (try once, never wait), release it; TTL 30 s; a refused try (the key is held) counts no pair. " +
		"**pgfence**: `pglease.TryAcquire` + `Lease.Release` (`WithoutAutoRenew`); its acquisition commits durably, its release asynchronously. " +
		"**raw SQL**: a plain upsert acquire with its expiry check and an `UPDATE … SET expires_at = now()` release on a plain lease table, each statement its own transaction, both committed durably (the server's synchronous_commit=on). " +
		"**advisory xact lock**: `BEGIN; SELECT pg_try_advisory_xact_lock(…); COMMIT` (no TTL, no fence, writes nothing, so it waits for no flush). " +
		"**cirello pglock** v1.16.1: `FailIfLocked`, no heartbeat, through database/sql on pgx. **redislock** (github.com/bsm/redislock, next section). All PostgreSQL contenders share one pool of as many connections as clients.")
	p("")
	p("| workload | clients | %s | pgfence / raw |", strings.Join(leaseOrder, " | "))
	p("|---|---:|%s---:|", strings.Repeat("---:|", len(leaseOrder)))
	for _, row := range r.leases {
		var cells []string
		for _, n := range leaseOrder {
			cells = append(cells, cell(row.rates, row.status, n))
		}
		p("| %s | %d | %s | %s |", row.workload, row.clients, strings.Join(cells, " | "), row.ratioRaw.ratio())
	}
	p("")
	flushes := r.flushesPerSecond()
	if flushes > 0 {
		p("**The ceiling.** A durable commit waits for a WAL flush, and commits that wait together share one (group commit), so pairs/s ≤ grants per flush × flushes/s. With one acquisition in flight per client, at most as many grants as clients share a flush: at %s flushes/s (`pg_test_fsync` above) the flush alone allows %s pairs/s per client (%s at 8 clients, %s at 32). %s", num(flushes), num(flushes), num(8*flushes), num(32*flushes), r.ceilingVerdict(flushes))
		p("")
	}
	for _, row := range r.leases {
		if !strings.HasSuffix(row.workload, "keys") || len(row.ratioRaw) == 0 {
			continue
		}
		want := leaseGoal(row.clients)
		why := "The server's CPU bounds both contenders on 2 cores shared with the client, and group commit shares the raw statements' flushes as it shares pgfence's; pgfence's acquisition does more per statement than the raw upsert (the fence draw, the tombstone probe, the forced durable commit), and its release is a statement as the raw one is."
		if row.clients == 1 {
			why = onePairBound(row, flushes)
		}
		goal(p, row.ratioRaw.median() >= want, fmt.Sprintf("pgfence ≥ %.1f× raw SQL at %d client(s), 10,000 keys: %s", want, row.clients, row.ratioRaw.ratio()), why)
	}
	r.footer(p, r.sectionCommand("leases", "clients", "duration", "keys"), "leases", "lease pairs per second against clients")
	return r.plotLeases()
}

func (r *report) redisSection(p printer) error {
	var rows []*leaseRow
	for _, row := range r.leases {
		if strings.HasSuffix(row.workload, "keys") {
			rows = append(rows, row)
		}
	}
	if len(rows) == 0 {
		return nil
	}
	p("")
	p("## Leases: pgfence against Redis")
	p("")
	p("The 10,000-keys rows of the previous section, pgfence beside **redislock** (github.com/bsm/redislock v0.9.4, `Obtain` + `Release`, TTL 30 s) on the Redis at %s, whose default configuration answers from memory and writes to disk in the background: a Redis lock survives no crash of Redis, while pgfence's acquisition is durable when it returns.", r.opts.redisAddr)
	p("")
	p("| clients | pgfence | redislock | pgfence / redislock |")
	p("|---:|---:|---:|---:|")
	for _, row := range rows {
		p("| %d | %s | %s | %s |", row.clients, cell(row.rates, row.status, cPgfence), cell(row.rates, row.status, cRedis), row.ratioRedis.ratio())
	}
	p("")
	for _, row := range rows {
		if row.clients == 32 && len(row.ratioRedis) > 0 {
			goal(p, row.ratioRedis.median() >= 0.5, fmt.Sprintf("pgfence ≥ 0.5× redislock at 32 clients: %s", row.ratioRedis.ratio()),
				"Each pgfence acquisition is a durable PostgreSQL commit (a WAL flush shared by the commits waiting together, and a server process's CPU on the 2 cores the client uses too); a Redis SET NX is a hash-table write in one single-threaded process.")
		}
	}
	r.footer(p, r.sectionCommand("leases", "clients", "duration", "keys"), "redis", "pgfence and redislock pairs per second against clients")
	return r.plotLines("redis", "leases, 10,000 keys", "clients", "acquire + release pairs/s", []string{cPgfence, cRedis}, rows2series(rows, []string{cPgfence, cRedis}))
}

func (r *report) coordSection(p printer) error {
	if len(r.coord) == 0 {
		return nil
	}
	r.coordTable(p)
	r.footer(p, r.sectionCommand("coord", "clients", "duration"), "coord", "pairs per second of each kind against clients")
	series := map[string]map[int]float64{}
	for _, row := range r.coord {
		for n, s := range row.rates {
			if series[n] == nil {
				series[n] = map[int]float64{}
			}
			series[n][row.clients] = s.median()
		}
	}
	return r.plotLines("coord", "coordination kinds", "clients", "acquire + release pairs/s", coordOrder, series)
}

func (r *report) handoffSection(p printer) error {
	if len(r.handoff) == 0 {
		return nil
	}
	p("")
	p("## Hand-off: release → next holder")
	p("")
	p("%d waiters block in `Acquire` on one key (sharing %d clients, as a few processes would); each holder releases as soon as it is granted. Latency: from the start of `Release` to the return of the next waiter's `Acquire`; medians over rounds of each round's quantile. **WithFairWaiting** queues the waiters in the database (first come, first served); with **WithWakeOnRelease** a release notifies the waiters (with both, only the queue's first). Statements per hand-off: every statement the pool's connections sent during the round, divided by the hand-offs.", r.opts.waiters, handoffClients(r.opts.waiters))
	p("")
	p("| mode | p50 | p90 | p99 | max | statements per hand-off | hand-offs |")
	p("|---|---:|---:|---:|---:|---:|---:|")
	for _, h := range r.handoff {
		p("| %s | %s | %s | %s | %s | %s | %d |", h.mode, msSample(h.p50), msSample(h.p90), msSample(h.p99), ms(h.max), h.stmts.rate(), h.handoffs)
	}
	r.footer(p, r.sectionCommand("handoff", "waiters"), "handoff", "hand-off latency quantiles per mode")
	return r.plotHandoff()
}

func msSample(s sample) string {
	if len(s) == 0 {
		return "–"
	}
	if len(s) == 1 {
		return fmt.Sprintf("%.1f ms", s[0])
	}
	return fmt.Sprintf("%.1f ms (%.1f–%.1f)", s.median(), s.min(), s.max())
}

func (r *report) jobSection(p printer) error {
	if len(r.jobs) == 0 {
		return nil
	}
	p("")
	p("## Jobs: claim.Runner against River")
	p("")
	p("%s no-op jobs inserted up front (not timed), then run to the last completion, with the same poll interval for both queues. **claim.Runner**: `claim.NewRunner`, no-op handler, `WithWorkers(n)`, `WithPollInterval(50ms)`, timed to the last `Completed` result (reported once the completion is durable). **River** v0.51.2 (riverpgxv5): `MaxWorkers` = n, `FetchCooldown` 1 ms, `FetchPollInterval` 50 ms, timed from `Start` to the last `JobCompleted` event. **one job per transaction**: n goroutines loop `BEGIN; SELECT id … FOR UPDATE SKIP LOCKED LIMIT 1; UPDATE … completed; COMMIT`. All three share one pool of %d connections; the job tables are truncated and vacuumed between runs.", num(float64(r.opts.jobs)), jobPoolConns)
	p("")
	p("| workers | %s | claim.Runner / River | claim.Runner / one per tx |", strings.Join(jobOrder, " | "))
	p("|---:|%s---:|---:|", strings.Repeat("---:|", len(jobOrder)))
	for _, row := range r.jobs {
		var cells []string
		for _, n := range jobOrder {
			cells = append(cells, cell(row.rates, row.status, n))
		}
		p("| %d | %s | %s | %s |", row.workers, strings.Join(cells, " | "), row.ratioRiver.ratio(), row.ratioTx.ratio())
	}
	p("")
	for _, row := range r.jobs {
		if len(row.ratioRiver) > 0 {
			goal(p, row.ratioRiver.median() >= 2, fmt.Sprintf("claim.Runner ≥ 2.0× River at %d workers: %s", row.workers, row.ratioRiver.ratio()), jobsWhy)
		}
	}
	r.footer(p, r.sectionCommand("jobs", "workers", "jobs"), "jobs", "jobs per second against workers")
	series := map[string]map[int]float64{}
	for _, row := range r.jobs {
		for n, s := range row.rates {
			if series[n] == nil {
				series[n] = map[int]float64{}
			}
			series[n][row.workers] = s.median()
		}
	}
	return r.plotLines("jobs", fmt.Sprintf("jobs, %s no-op jobs", num(float64(r.opts.jobs))), "workers", "jobs/s", jobOrder, series)
}

// jobsWhy says what bounds claim.Runner against River on this machine.
const jobsWhy = "claim.Runner spends one round trip and one durable commit per batch (the previous batch's completions and the next claim in one transaction) and never claims more jobs than it has idle workers, so with a no-op handler its rate is the workers over the length of one such round, which the server's CPU sets on 2 cores shared with the client. Each claim's index scan also walks past the entries of every job claimed before it in the run (a claim's update leaves the old entry behind until a vacuum, and autovacuum is off here): with 19,000 jobs claimed, the scan for 8 jobs took 7 ms against 0.3 ms after a VACUUM on this machine. River's fetch walks its index the same way."

func (r *report) bouncerSection(p printer) error {
	if r.bouncerSkip != "" {
		p("")
		p("## PgBouncer against direct connections")
		p("")
		p("Skipped: %s.", r.bouncerSkip)
		return nil
	}
	if len(r.bouncer) == 0 {
		return nil
	}
	p("")
	p("## PgBouncer against direct connections")
	p("")
	p("%s in transaction mode, started by the benchmark on a free loopback port with a server pool of %d connections (so that no client queues for a server session) and stopped by its PID at the end; the same workloads run through it and directly, alternating, all without TLS. **lease pairs**: the 10,000-keys workload of the lease section on a pglease client of its own per route. **jobs**: claim.Runner as in the jobs section. **direct**: pgx's default exec mode (`cache_statement`, named prepared statements); **cache_describe**: the pool's `default_query_exec_mode=cache_describe`, unnamed statements whose types pgx caches. Behind a pooler pglease sends its statements unnamed whatever the pool's mode; claim.Runner pipelines a batch's completions with the next claim only when the pool's own mode is safe there.", r.bouncerVersion, bouncerServerConns)
	p("")
	cols := []string{rDirect, rDirectDesc, rBouncer, rBouncerDesc}
	p("| workload | clients or workers | %s | PgBouncer / direct | PgBouncer, cache_describe / direct |", strings.Join(cols, " | "))
	p("|---|---:|%s---:|---:|", strings.Repeat("---:|", len(cols)))
	for _, row := range r.bouncer {
		var cells []string
		for _, n := range cols {
			c := cell(row.rates, row.status, n)
			cells = append(cells, c)
		}
		p("| %s | %d | %s | %s | %s |", row.workload, row.count, strings.Join(cells, " | "), row.ratio[rBouncer].ratio(), row.ratio[rBouncerDesc].ratio())
	}
	p("")
	for _, row := range r.bouncer {
		best, route := row.ratio[rBouncer], rBouncer
		if m := row.ratio[rBouncerDesc]; len(m) > 0 && (len(best) == 0 || m.median() > best.median()) {
			best, route = m, rBouncerDesc
		}
		if len(best) == 0 {
			continue
		}
		why := "Every statement crosses one more process and one more loopback hop, on the same 2 cores; pglease's statements go unnamed behind the pooler, so the server parses and plans each one again (compare direct, cache_describe)."
		if row.workload == "jobs" {
			why = "With pgx's default mode behind the pooler, claim.Runner sends a batch's completions and the next claim as two transactions, two round trips and two flushes; set `default_query_exec_mode=cache_describe` on the pool (the other column) to keep them in one."
		}
		goal(p, best.median() >= 0.8, fmt.Sprintf("%s through PgBouncer ≥ 0.8× direct at %d (%s): %s", row.workload, row.count, route, best.ratio()), why)
	}
	r.footer(p, r.sectionCommand("pgbouncer", "clients", "workers", "duration", "jobs"), "pgbouncer", "rates through PgBouncer and direct")
	return r.plotBouncer()
}

func (r *report) scaleSection(p printer) error {
	if len(r.scale) == 0 {
		return nil
	}
	p("")
	p("## Scale: big tables and sweeps")
	p("")
	if r.scaleNote != "" {
		p("%s", r.scaleNote)
		p("")
	}
	p("| what | figure | note |")
	p("|---|---|---|")
	for _, s := range r.scale {
		p("| %s | %s | %s |", s.what, s.figure, s.note)
	}
	p("")
	if r.scaleAcquireRatio > 0 {
		goal(p, r.scaleAcquireRatio <= 1.2, fmt.Sprintf("acquire latency with %s rows within 20%% of 10³: %.2f×", num(float64(r.opts.scaleRows)), r.scaleAcquireRatio),
			"The upsert is a primary-key lookup; a bigger table costs index depth and cache misses, and the two sizes run one after the other.")
	}
	if r.sweepP99 > 0 {
		goal(p, r.sweepP99 <= 10*time.Millisecond, fmt.Sprintf("acquire p99 ≤ 10 ms during a sweep: %s", ms(r.sweepP99)),
			"The sweep's batches commit asynchronously but run back to back: one server process stays busy for the whole sweep on 2 shared cores.")
	}
	if r.purgeP99 > 0 {
		goal(p, r.purgeP99 <= 50*time.Millisecond, fmt.Sprintf("claim p99 ≤ 50 ms during a purge: %s", ms(r.purgeP99)),
			"The purge's batches commit asynchronously but run back to back: one server process stays busy for the whole purge on 2 shared cores.")
	}
	r.footer(p, r.sectionCommand("scale", "scale-rows", "jobs", "duration"), "", "")
	return nil
}

func (r *report) memorySection(p printer) error {
	m := r.memory
	if m == nil {
		return nil
	}
	p("")
	p("## Memory: client cost of a held lease")
	p("")
	p("One client holds %s leases at once, auto-renewed (the default, TTL 60 s); `runtime.ReadMemStats` after GC before and after acquiring them (the pool and its connections opened before).", num(float64(m.held)))
	p("")
	p("| held leases | heap before | heap after | heap per lease | goroutines before → after | goroutines per lease |")
	p("|---:|---:|---:|---:|---:|---:|")
	p("| %s | %s B | %s B | %s B | %d → %d | %.3f |", num(float64(m.held)), num(float64(m.heapBefore)), num(float64(m.heapAfter)), num(m.bytesPerLease), m.goroutinesBefore, m.goroutinesAfter, m.goroutinesPerLease)
	p("")
	goal(p, m.bytesPerLease <= 2048, fmt.Sprintf("≤ 2 KiB heap per held lease: %s B", num(m.bytesPerLease)), "Each held lease keeps its own context, timers and bookkeeping on the client.")
	goal(p, m.goroutinesPerLease < 0.01, fmt.Sprintf("no goroutine per held lease: %.3f per lease", m.goroutinesPerLease), "")
	r.footer(p, r.sectionCommand("memory", "held"), "", "")
	return nil
}

// writePage writes the Markdown page (the plots were written with it).
func (r *report) writePage(md string) error {
	return os.WriteFile(r.opts.out, []byte(md), 0o644)
}
