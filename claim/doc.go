// Package claim hands job rows to workers with a lease and a fence per row,
// the way a PostgreSQL job queue should: a stale worker can never complete,
// fail, extend or release a job that was rescued and claimed again.
//
// A job row moves through four states:
//
//	available --Claim--> running --Complete--> completed
//	                      |  |  \--Fail------> available (retry at run_at) or dead
//	                      |  \--Release-----> available (the attempt is not counted)
//	                      \--Rescue (lease expired)--> available, or dead after max attempts
//
// Claim takes up to n runnable rows in ONE statement: it picks rows whose
// run_at has come, in priority, run_at, id order, LIMIT n FOR UPDATE SKIP
// LOCKED, and sets them running with attempt + 1, a new fence from
// pgfence_next_fence() (never repeated, see package migrations), the
// claimer's owner label and expires_at = now() + TTL, by the database
// clock: a job row's lease uses package pglease's words (a TTL, expires at a
// time by the database clock, is renewed, has a local deadline, carries a
// fence). Each later write by the worker — Renew, Complete, Fail, Release
// — is one UPDATE matched on id + fence + state = 'running'. Zero rows is an
// answer: a *[LeaseLostError], errors.Is(err, [ErrLeaseLost]). This is the check
// that River, Oban, pg-boss and Graphile Worker lack: there a worker whose job
// was rescued and handed to another worker can still mark the new attempt
// completed.
//
// Renew extends the lease only while it is unexpired, so it can never
// resurrect a lease that Rescue may already have taken. Complete, Fail and
// Release need no unexpired lease: while the row still carries the fence, no
// one else can have the job. Rescue returns expired running rows to the queue
// in ONE guarded UPDATE (state = 'running' AND expires_at <= now() is
// re-checked by the UPDATE itself, never read first and written by id); the
// expired attempt stays counted, and a job whose last attempt expired becomes
// dead.
//
// Finished rows stay in the table until SweepFinished deletes the completed and dead
// jobs whose finished_at is older than a given age (it needs the FinishedAt
// column). It walks the table by id in batches ([WithSweepBatch]), each its own
// short transaction that re-checks state and finished_at on the row it
// deletes, so claims stay fast during a sweep of millions of rows and a job
// that runs, or finished more recently, is never deleted.
//
// Besides the lease in the database, every [Job] keeps a pessimistic local
// deadline on Go's monotonic clock (time before the claim or renewal was
// sent + TTL − TTL/10). The worker pool ([Runner]) ends the job's context
// when it passes or a renewal finds the lease gone.
//
// The ready-made table is pgfence_jobs (migration 000003). A table of your own
// works too: name it and its columns with [WithTable]; [New] checks them against
// the catalog and every identifier is quoted with pgx.Identifier.Sanitize.
// Values are always bound parameters. Every statement is written once, in
// queries/claim.sql against pgfence_jobs, where sqlc checks it against the
// schema; internal/sqltmpl fills in your table's names at the places the
// file marks.
//
// Runner runs N workers over a [Claimer] and spends the database sparingly: one
// claim statement takes as many jobs as there are idle workers (waiting up to
// half a claim's round trip for workers about to free up, so they share it);
// one goroutine extends the leases of all running jobs in one renew
// statement per round (a job's local deadline is a timer, not a goroutine);
// and the jobs whose handler returned nil are completed in one statement per
// batch (UPDATE … FROM unnest(ids, fences), each row still matched on id +
// fence + state 'running'), pipelined with the next claim in one transaction
// when a claim is due (one durable commit for both), so a worker takes its
// next job while the last one's completion is written. Each job learns on its own
// whether its completion counted (LeaseLost when it did not), and [Completed]
// is reported only after the completion committed durably. A handler that
// returns nil after its context ended with a lost lease gets no completion:
// LeaseLost, and Rescue takes the job back after its expiry. A completion
// whose answer was lost (connection cut) is settled before it is reported:
// it is sent again and the rows are read back by id + fence on another
// connection, within the write timeout; WriteError only when even that
// fails. Runner also rescues expired leases periodically, wakes on
// LISTEN/NOTIFY when asked to (polling stays the fallback), and on shutdown
// lets in-flight jobs finish within a grace period, releases the rest and
// writes the completions still queued. Every goroutine it starts has stopped
// when Run returns.
//
// [NewTxRunner] runs each job's handler in a transaction that also completes the
// job (CompleteTx), so a job's effects in this database count only if its
// completion does. That is one transaction, and one durable commit, per job:
// it does not batch completions, and runs at a fraction of Runner's rate (see
// BenchmarkJobThroughput). Each worker holds a pool connection for its
// handler's transaction, so the pool's MaxConns must be at least workers + 2
// (+1 with WithListen); NewTxRunner refuses a smaller pool. A [TxHandler] that returns nil after its context
// ended with a lost lease is LeaseLost and its effects roll back; a commit
// whose answer was lost is settled by reading the row back by id + fence
// (completed under this fence: Completed; still running under it: the
// commit did not land, the attempt is recorded as failed; otherwise
// LeaseLost).
//
// Metrics: a Claimer records OpenTelemetry metrics (jobs claimed, completed,
// failed, rescued and lease lost; queue depth and the oldest runnable job's
// age, queried at most every [WithQueueStatsInterval]; its pool's figures)
// through the API only, to [WithMeterProvider] or the global provider; the
// instruments are documented once, in the README's "Metrics" section
// (https://github.com/pgfence/pgfence#metrics).
//
// [Enqueue] takes a fencedb.DBTX (a pool, a connection or a pgx.Tx); [Querier]
// is a deprecated alias of it.
package claim
