// Package faultsuite keeps pgfence's safety claims proven under faults. Its
// tests start a throwaway PostgreSQL cluster, run several worker processes
// (the test binary re-executed, see internal/worker) that take leases, write
// fenced rows and claim and complete jobs through a fault proxy, and inject
// faults meanwhile: SIGSTOP of a worker past its lease's TTL, termination of
// its backends, blackholed, cut and delayed connections, and crash-restarts
// of the server. Every operation is recorded with its outcome (ok, refused,
// ambiguous) and its invocation and answer times, and the history is checked
// afterwards: the row writes against a fenced-register model with the
// porcupine linearizability checker, the jobs directly (every acknowledged
// completion present, no job's effect applied twice), the lease grants for
// rising fences. Mutual exclusion itself is checked on the database's own
// record of every lease row version (a trigger the suite installs): each
// grant's fence is higher than the previous holder's and it was granted no
// earlier than that holder's lease expired. Likewise every committed update
// of a fenced row is recorded, and the fence it applied must never go down,
// even where no read saw it. An unfenced control run of the same workload
// must be flagged, and overlapping grants and a hidden stale write injected
// after the fenced run must be reported, so the checkers are known to bite.
//
// The short run is part of go test; PGFENCE_SOAK=10m makes it a soak of
// that length (docs/testing.md).
package faultsuite
