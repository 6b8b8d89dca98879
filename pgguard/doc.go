// Package pgguard is the resource's half of fencing: a write from a stale
// lease holder fails, atomically with the write, in PostgreSQL.
//
// It takes a fence as an int64 from any source (a lease, a claimed job row, a
// leader's epoch) and never imports pglease. A [Guard] names a table, its key
// column and its fence column; [Guard.Update] changes the row only if the
// fence is at least the row's, and stamps it, in one statement. Zero rows is
// an answer: [ErrStaleFence] (with both fences), [ErrAlreadyDone],
// [ErrPrecondition] or [pgfence.ErrNotFound]. [Guard.ClaimFirst] refuses stale writes
// even before the new holder's first one. [InstallTrigger] makes the database
// refuse stale or unfenced UPDATEs and DELETEs from any SQL, for fences set
// in the same transaction ([RunFenced], [SetFence]). Fencing stops holders
// that are late, not roles that lie: privileges remain the boundary.
package pgguard
