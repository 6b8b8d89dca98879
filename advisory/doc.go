// Package advisory runs a function under a PostgreSQL transaction-level
// advisory lock, taken as the first statement of a transaction the function
// then uses: [TryDo] skips when the key is held, [Do] waits until ctx ends.
// The key is held for as long as the function runs, even after one of its
// statements fails, and the function's writes commit or roll back with the
// lock's release. It is the alternative to a lease for work that only touches
// this database: no TTL and no fence are needed. Only the session ending
// (connection lost, backend terminated, server crash) ends the lock early;
// the function's writes roll back then, but an effect outside the database
// does not: that needs a lease with a fence (packages pglease and pgguard).
// Keys are [Int64Key], [PairKey] or [StringKey]; [SessionLock] is for the
// rare lock that must outlive a transaction, and not behind a transaction
// pooler.
package advisory
