// Stale writer: worker A takes the lease on an invoice, freezes past its TTL
// (a GC pause, a VM migration), and writes late. Worker B took the lease in
// between with a newer fence. The two orderings of that
// race:
//
//  1. B writes first, then A's late write arrives: the fence refuses it.
//  2. Claim-first off, and A's late write arrives BEFORE B's first write: it
//     is accepted, because the row has seen no newer fence yet. That is the
//     documented limit of fencing ("it does not cancel work in flight"), and
//     B proceeds from the state it read before that write.
//  3. Claim-first on: B raises the row's fence as its first action, in the
//     same statement as the read of the state it inherits; A's late write is
//     refused wherever it lands.
//  4. Database-enforced fencing: a hand-written UPDATE that forgot the fence
//     predicate is refused by the fencing trigger.
//
// A's freeze is simulated in-process: its lease client does not auto-renew
// (a frozen process sends no renewals either), and its next step simply runs
// after B's.
//
//	go run ./examples/stalewriter
package main
