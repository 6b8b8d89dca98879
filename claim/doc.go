// Package claim hands job rows to workers with a lease and a fence per row,
// so that a stale worker can never complete, fail, renew or release a job
// that was rescued and claimed again.
//
//	available --Claim--> running --Complete--> completed
//	                      |  |  \--Fail------> available (retry at run_at) or dead
//	                      |  \--Release-----> available (the attempt is not counted)
//	                      \--Rescue (lease expired)--> available, or dead after max attempts
//
// [Claimer.Claim] takes up to n runnable rows in one statement (FOR UPDATE
// SKIP LOCKED), each with a new fence and a TTL judged by the database clock.
// Every later write of the worker is one UPDATE matched on id, fence and
// state 'running'; zero rows is a [pgfence.LeaseLostError]. [Runner] runs N workers
// over a Claimer; [NewTxRunner] completes each job in the transaction of its
// effects. The table is pgfence_jobs, or one of your own ([WithTable]).
package claim
