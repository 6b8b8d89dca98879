// Job workers: three worker processes claim jobs from one table with
// FOR UPDATE SKIP LOCKED, each job under a lease and a fence of its own
// (package claim). A long job outlives its lease and survives because the
// runner renews it. Then a worker freezes on a job past its lease: the job
// is rescued and claimed again by another worker, and when the frozen worker
// comes back its completion is refused — the check that River, Oban,
// pg-boss and Graphile Worker lack.
//
//	go run ./examples/jobs
package main
