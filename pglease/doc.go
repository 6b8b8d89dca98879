// Package pglease grants leases on named keys from PostgreSQL, each grant
// with a fencing token.
//
// A lease is held by one owner at a time, for a TTL of 10ms to 24h judged by
// the database's now() alone (a longer TTL would turn a crashed holder into
// an outage of over a day: renew a shorter lease instead); acquire, renew and release are one statement each, run in
// their own short transaction, and return within their context's deadline.
// Every grant carries a fence larger than every fence granted before, which
// never repeats or goes backwards while grants commit durably and one primary
// grants at a time (the WAL timeline is the fence's high bits); a client
// refuses a grant from an older timeline than it has seen
// ([pgfence.ErrStaleTimeline]). Renew never resurrects an expired lease and release
// never touches a newer holder's. A lease's Context ends, with a
// [pgfence.LeaseLostError], when renewals fail until the client's local deadline,
// which passes before the server's expiry. No lease stops a paused holder
// from writing late: pass [Lease.Fence] with each protected write and let
// the resource refuse older fences (package pgguard).
//
// A key is one lock whatever kind its holders ask for; a plain lease is its
// exclusive kind. The other kinds, each grant with its own fence:
// [Permits] (N permits per key, a slot each), [Shared]
// (readers beside each other, excluded by the exclusive lease, with writer
// preference),
// [Client.AcquireSet] (several keys, all or none), [WithFairWaiting]
// (waiters of every kind in arrival order), and [Lease.HoldAtLeast] with
// [Client.OncePerPeriod] for scheduled work; docs/coordination.md says when
// to use which.
package pglease
