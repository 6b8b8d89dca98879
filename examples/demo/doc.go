// The demo: the whole idea of pgfence in one run, with real processes.
//
//  1. Three billing instances, each with its own lease client, notice at
//     the same moment that invoice inv_72 is due and compete for the lease
//     invoice:inv_72: one is granted it and sends the invoice, the others
//     skip.
//  2. A worker (a separate process) is granted the lease, reads the job,
//     checks its lease, and is frozen with SIGSTOP just before its write,
//     as a long garbage-collection pause or a stalled VM would freeze it.
//     Its lease expires by the database clock; a second instance is granted
//     it with a larger fence and sends the invoice. The frozen worker
//     resumes and writes with its old fence: the resource (a pgguard
//     guarded write) refuses it, because a newer fence has written since.
//  3. The same run without the fence: the invoice is sent twice. The lock
//     alone could not stop the late write; only the resource can.
//
// Times are scaled down: a lease lasts 2 s in scene 1 and 1 s in the
// stale-writer scenes, where the freeze lasts 1.5 s.
//
//	go run ./examples/demo
//
// It needs no set-up: unlike the other examples, when no server is
// reachable (package story says how one is found) it starts a throwaway
// PostgreSQL from the local server binaries and removes it on exit
// (throwaway.go).
package main
