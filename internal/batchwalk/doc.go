// Package batchwalk runs a maintenance walk (pglease's sweep of expired
// leases, claim's sweep of finished jobs) as a series of short batches, each
// its own transaction, resting between batches.
//
// Why rest: a walk of a million rows sent back to back keeps one server
// process busy for seconds and writes WAL that the acquisitions and claims
// running meanwhile must flush with their durable commits. Resting as long as
// the last batch took caps the walk at about half of one server core, so the
// p99 of the statements it shares the server with stays close to what it is
// without the walk; the walk takes about twice as long, which maintenance
// can afford.
package batchwalk
