// Package advisory runs a function under a PostgreSQL transaction-level
// advisory lock, taken as the first statement of a transaction the function
// then uses: [TryDo] skips when the key is held, [Do] waits until ctx ends.
// The function's writes commit or roll back with the lock's release, and the
// lock never outlives them. It is the alternative to a lease for work that
// only touches this database: no TTL and no fence are needed, because the
// lock and the data share one transaction. Work with effects outside the
// database needs a lease with a fence (packages pglease and pgguard).
//
// Keys are [Int64Key], [PairKey] or [StringKey]; [SessionLock] is for the
// rare lock that must outlive a transaction, and does not work behind a
// transaction pooler.
package advisory
