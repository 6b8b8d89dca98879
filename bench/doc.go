// Command bench runs pgfence and its peers side by side in one process,
// interleaved over several rounds, and writes BENCHMARKS.md at the
// repository root with a PNG plot of throughput against clients.
//
// It is a Go module of its own (bench/go.mod, with a replace of pgfence to
// ../), so that River, cirello.io/pglock, redislock, go-redis and gonum/plot
// never enter the library's module graph.
//
//	cd bench && go run .                 # full run, about 10 minutes
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
//   - handoff: -waiters waiters on one key; release → next holder latency,
//     with and without pglease.WithWakeOnRelease.
//   - jobs: claim.Runner vs River vs one job per transaction (FOR UPDATE SKIP
//     LOCKED LIMIT 1), -jobs no-op jobs inserted up front, per -workers count.
//   - scale: acquire latency with 10^3 vs -scale-rows rows in lock_leases,
//     claim rate with -scale-rows completed jobs kept, and the p99 of
//     acquire/claim while a sweep of expired leases or a purge of finished
//     jobs of that size runs.
//   - memory: client heap and goroutines per held, auto-renewed lease.
//
// The database comes from -db or PGFENCE_DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/postgres). The program creates a
// database pgfence_bench_<random> there, migrates it with pgfence's
// migrations and River's, and drops it at the end, also on Ctrl-C or
// -timeout. A peer that cannot run here (Redis down) is reported as
// "skipped: reason" in the table; a contender that fails is reported as
// "failed: error" and makes the program exit non-zero.
package main
