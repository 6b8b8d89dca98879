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
// claimer's owner label and lease_until = now() + lease, by the database
// clock. Each later write by the worker — Heartbeat, Complete, Fail, Release
// — is one UPDATE matched on id + fence + state = 'running'. Zero rows is an
// answer: a *LeaseLostError, errors.Is(err, ErrLeaseLost). This is the check
// that River, Oban, pg-boss and Graphile Worker lack: there a worker whose job
// was rescued and handed to another worker can still mark the new attempt
// completed.
//
// Heartbeat extends the lease only while it is unexpired, so it can never
// resurrect a lease that Rescue may already have taken. Complete, Fail and
// Release need no unexpired lease: while the row still carries the fence, no
// one else can have the job. Rescue returns expired running rows to the queue
// in ONE guarded UPDATE (state = 'running' AND lease_until <= now() is
// re-checked by the UPDATE itself, never read first and written by id); the
// expired attempt stays counted, and a job whose last attempt expired becomes
// dead.
//
// Besides the lease in the database, every Job keeps a pessimistic local
// deadline on Go's monotonic clock (time before the claim or heartbeat was
// sent + lease − lease/10). The worker pool (Pool) ends the job's context
// when it passes or a heartbeat finds the lease gone.
//
// The ready-made table is pgfence_jobs (migration 000003). A table of your own
// works too: name it and its columns with WithTable; New checks them against
// the catalog and every identifier is quoted with pgx.Identifier.Sanitize.
// Values are always bound parameters.
//
// Pool runs N workers over a Claimer: it claims in batches as workers free
// up, heartbeats each job at a third of its lease, ends a job's context when
// its lease is lost, rescues expired leases periodically, wakes on
// LISTEN/NOTIFY when asked to (polling stays the fallback), and on shutdown
// lets in-flight jobs finish within a grace period and releases the rest.
// Every goroutine it starts has stopped when Run returns. NewTxPool runs each
// job's handler in a transaction that also completes the job (CompleteTx),
// so a job's effects in this database count only if its completion does.
package claim
