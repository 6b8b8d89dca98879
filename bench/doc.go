// Command bench runs pgfence and its peers side by side in one process,
// interleaved over several rounds, and writes BENCHMARKS.md at the
// repository root: the machine once, then per section what it measures, a
// table of the run's medians and ranges, its goal, the command that reruns
// it and a PNG plot (in bench/plots).
//
// It is a Go module of its own (bench/go.mod, with a replace of pgfence to
// ../), so that River, cirello.io/pglock, redislock, go-redis and gonum/plot
// never enter the library's module graph.
//
//	cd bench && go run . -page ../BENCHMARKS.md   # the whole page, about 20 minutes
//	cd bench && go run . -smoke -out /tmp/bench-smoke.md   # CI: every contender, ~30 s
//	cd bench && go run . -only leases -rounds 5 -duration 3s -clients 1,8,32
//
// Sections (-only):
//
//   - leases: acquire + release pairs/s at each -clients count, on -keys keys
//     and on one hot key: pgfence (pglease.TryAcquire + Release, no
//     auto-renew), two plain lease statements raw through pgx on their own
//     table, pg_try_advisory_xact_lock in a transaction, cirello.io/pglock
//     (FailIfLocked, no heartbeat) and github.com/bsm/redislock on -redis.
//   - coord: acquire + release pairs/s of each lease kind (mutex, semaphore,
//     shared, key set) at each -clients count.
//   - handoff: -waiters waiters on one key; release → next holder latency,
//     with and without pglease.WithWakeOnRelease and WithFairWaiting.
//   - jobs: claim.Runner vs River vs one job per transaction (FOR UPDATE SKIP
//     LOCKED LIMIT 1), -jobs no-op jobs inserted up front, per -workers count.
//   - pgbouncer: lease pairs at each -clients count and claim.Runner jobs at
//     each -workers count through a PgBouncer in transaction mode that the
//     program starts from the local binary (and stops by its PID), against
//     direct connections, alternating; skipped when pgbouncer is missing.
//   - scale: acquire latency with 10^3 vs -scale-rows rows in lock_leases,
//     claim rate with -scale-rows completed jobs kept, and the p99 of
//     acquire/claim while a sweep of expired leases or a purge of finished
//     jobs of that size runs.
//   - memory: client heap and goroutines per held, auto-renewed lease.
//
// The database comes from -db or PGFENCE_DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable). The program creates a
// database pgfence_bench_<random> there, migrates it with pgfence's
// migrations and River's, and drops it at the end, also on Ctrl-C or
// -timeout. A peer that cannot run here (Redis down) is reported as
// "skipped: reason" in the table; a contender that fails is reported as
// "failed: error" and makes the program exit non-zero.
package main
