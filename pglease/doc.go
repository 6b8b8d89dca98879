// Package pglease grants leases on named keys from a PostgreSQL table,
// lock_leases, with a fencing token on every grant.
//
// A lease decides who may try a protected operation, and for how long. It
// cannot stop a holder that was paused past its lease from acting late, so
// every grant carries a fence: a number larger than every fence granted
// before on that key. Pass it to the resource with each protected write and
// let the resource refuse older ones (package pgguard). The lock decides who
// may try; the resource decides which writes count.
//
// Semantics, all of them decided by the database:
//
//   - Acquire, renew and release are one statement each and use the
//     database's now() as the only clock. They run in their own short
//     transaction on the pool, never inside the caller's. Acquisitions of
//     one client that arrive while 2 of its acquisitions are in flight go
//     out together in one statement and one commit (group acquire), each
//     judged as if alone and each caller answered for its own key.
//   - Fences never repeat and never go backwards for a key, across release,
//     deletion of the row (SweepExpired), a crash-restart and the promotion of
//     a standby: fence = WAL timeline << 44 | a sequence. That holds while one
//     primary grants at a time. A stale primary that still accepts writes
//     after a failover (a paused "zombie"), or a failover that is undone
//     (the cluster rewound to an older timeline), grants fences from an older
//     timeline: each client keeps a high-water mark of the timelines of the
//     fences it has seen and refuses such a grant with [ErrStaleTimeline],
//     giving it back ([WithTimelineMark] shares one mark, for example with
//     the fences a process passes to package pgguard). A client that has
//     not yet seen the new primary cannot tell; docs/failover.md says which
//     replication and HA settings close that gap.
//   - TryAcquire, Acquire and Release return within their context's deadline
//     plus a few milliseconds (until Close begins). Settling an acquisition
//     whose answer was lost goes on in the background once the caller's
//     context ends, each statement bounded by [ResolveBound] (metric
//     pgfence.lease.ambiguous.resolutions).
//   - Renew extends only an unexpired lease that still carries its fence; it
//     never resurrects an expired one. Release expires the lease but keeps
//     the row, and never touches a newer holder's lease.
//   - Acquire and renew commit durably whatever the session's
//     synchronous_commit (a grant lost in a crash could hand its fence out
//     twice). Release commits asynchronously by default: a release lost in a
//     crash only makes the lease run to its TTL, which is safe, and it saves
//     one WAL flush per acquire + release. [WithDurableRelease] makes it
//     durable.
//   - The client keeps a pessimistic local deadline on the monotonic clock
//     (time before sending + TTL - safety margin). Auto-renewal (default every
//     TTL/3) moves it; when it passes, or a renewal finds the lease gone, the
//     lease's Context ends with ErrLeaseLost.
//   - An acquisition whose answer is lost (the connection broke after it was
//     sent) is settled with the random owner token sent with it: a caller
//     still waiting keeps a lease that was granted, and one that gave up has
//     it released and leaves a tombstone for the token, so that the request
//     grants nothing however late the network delivers it (tombstones are
//     kept for [AbandonedTokenRetention]; SweepExpired deletes older ones).
//   - Acquire waits for a held key by polling, with exponential backoff and
//     full jitter ([WithBackoff]). [WithWakeOnRelease] (default: off) adds a
//     wake-up: the client's releases send NOTIFY pgfence_lease_released
//     with the key in the same statement, delivered at commit (opt-in,
//     because notifying commits are serialised by PostgreSQL), and its one
//     listening connection (LISTEN, started on the first wait, ended by
//     Close) ends the sleep of this client's waiters for that key, so they
//     retry within milliseconds of the release. Polling stays as the
//     fallback: for notifications lost while the listener reconnects, and
//     for leases that end by expiry, which notify nobody. LISTEN needs a
//     session: connect directly or through a session-pooling proxy, not
//     PgBouncer's transaction pooling, where waiters only poll.
//   - Campaign runs leader election on a key; the lease's fence is the
//     term's epoch. Observe follows a key's holder for followers: a channel
//     (latest value only, never a backlog) that gets the current [Holder] at
//     once and then each new grant or end of a lease, by polling
//     ([WithObserveInterval], default 200ms), at the lease's expiry, and at
//     once on a notified release with WithWakeOnRelease.
//
// Beyond the mutex, on the same machinery (expiry by the database clock,
// auto-renewal, the loss context, owner tokens for lost answers), every grant
// with its own fence from the one fence source:
//   - [Client.Semaphore]: N permits per key, enforced by the database, each a
//     *Lease with a slot 0..N-1 ([Lease.Slot]); callers that disagree about N
//     get [ErrPermitsMismatch].
//   - [Client.AcquireShared] and [Client.AcquireExclusive]: many readers or
//     one writer, with writer preference once a writer waits.
//   - [Client.AcquireSet]: several keys in one statement, all or none.
//   - [WithFairWaiting]: Acquire waiters granted in arrival order, by a queue
//     in the database; with WithWakeOnRelease a release wakes the first only.
//   - [Lease.HoldAtLeast] and [Client.OncePerPeriod]: a minimum hold for
//     scheduled work.
//
// See docs/coordination.md for when to use which.
//
// Zero rows is an answer: [ErrNotAcquired], ErrLeaseLost, and [WaitError] (which
// says how long Acquire waited) are returned, never swallowed.
//
// Metrics: the client records OpenTelemetry metrics (acquisitions, waits,
// leases held and lost by cause, renewal failures, its pool's figures)
// through the API only, to [WithMeterProvider] or the global provider; the
// instruments are documented once, in the README's "Metrics" section
// (https://github.com/pgfence/pgfence#metrics).
package pglease
