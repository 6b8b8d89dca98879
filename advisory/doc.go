// Package advisory runs a function under a PostgreSQL transaction-level
// advisory lock: pg_try_advisory_xact_lock ([TryDo]) or pg_advisory_xact_lock
// ([Do]), taken as the first statement of a transaction that the function then
// uses. Its writes commit or roll back together with the lock's release, and
// the lock can never outlive them: PostgreSQL releases it at COMMIT, at
// ROLLBACK, and when the connection drops, because the transaction ends.
//
// This is the alternative to a lease for work that only touches
// this database: no lease, no TTL, no fence, since the lock and the data
// share one transaction and one failure domain. For work with side effects
// outside the database, use a lease with a fence (package pglease) and guard
// the resource.
//
// Keys. PostgreSQL has two advisory key spaces that do not overlap: one
// bigint, or two integers. [Int64Key] and [PairKey] name keys directly (PairKey
// suits "namespace, object id" schemes). [StringKey] maps a string to a bigint
// with the first 8 bytes of its SHA-256 digest, big-endian, as a signed
// int64. SHA-256 rather than PostgreSQL's hashtext/hashtextextended: it is
// specified and stable everywhere (hashtext's output is an implementation
// detail that has changed between major versions), it is computed in Go
// without a round trip, it spreads adversarial or similar keys uniformly, and
// the same key can be computed in SQL (see [KeySQL]) so that psql scripts and
// other languages take the very same lock.
//
// Collision odds: two distinct strings share a bigint with probability
// 2^-64. Among n distinct keys in use, the chance that any two collide is
// about n²/2^65: 3e-8 for a million keys, 3e-4 for a hundred million. A
// collision never weakens mutual exclusion; it only makes two unrelated keys
// wait for each other, as if they were one.
//
// Waiting. Do blocks until the lock is granted or ctx ends. What pgx does
// with a cancelled context depends on the connection's context-watcher
// handler (pgconn.Config.BuildContextWatcherHandler): recent pgx sends a
// cancel request while closing the connection, but a handler that only
// closes the socket, or does nothing, leaves the server's backend queued for
// the lock (a backend waiting for a lock does not notice a closed socket),
// and it takes the lock later. Do does not depend on it: when ctx ends it
// sends the server a cancel request itself, which interrupts the wait at
// once, and then discards the connection, so that no late cancel can hit a
// later statement. If the server does not act on the cancel within a few
// seconds, the socket is closed.
//
// Session-level locks ([SessionLock], from [TryLockSession] and [LockSession])
// exist for locks that must outlive any reasonable transaction. Each holds a
// dedicated connection taken out of the pool. A session-level lock lives as
// long as the server session, not the transaction; behind a
// transaction-pooling proxy such as PgBouncer, consecutive transactions run
// on different server sessions, so the session that took the lock may not be
// the one that releases it, and another client may inherit a lock it never
// asked for. Transaction-level locks are safe there, since the proxy keeps a
// transaction on one server session. See SessionLock.
//
// Held for as long as fn runs. PostgreSQL releases a transaction's locks the
// moment one of its statements fails, not at the ROLLBACK that follows. So
// TryDo and Do run fn inside a savepoint set right after the lock: a failed
// statement of fn's aborts the savepoint only, and the key stays held until
// fn returns and the transaction ends. fn's tx.Commit and tx.Rollback end
// that savepoint, never the lock's transaction. Behind a transaction pooler
// (detected when the server session's pid is not the one the connection
// announced), fn's statements go out unnamed, since the pool's default exec
// mode may rely on named prepared statements that the pooler mixes up
// between clients; pgfence's own statements never use them.
//
// What still ends the lock while fn runs: the session itself ending (a
// dropped connection, pg_terminate_backend, idle_in_transaction_session_timeout
// or a server crash). fn's own database writes are safe then, because they
// roll back with the transaction; an effect outside the database (an e-mail,
// a provider call) is not. Only a fence checked by the resource protects
// those: use a lease (package pglease) and guard the resource (package
// pgguard).
package advisory
