// Package pgfence holds what every pgfence package shares, so that none of
// them has to import a sibling for it: the conditions errors.Is matches
// whichever package returned them (ErrNotAcquired from pglease and advisory,
// ErrLeaseLost from pglease and claim, ErrConflict from lockless and payouts,
// ErrNotFound from pgguard and lockless, ErrInvalidInput from all of them),
// the database handle their statements run on (DBTX), and the fence's WAL
// timeline and the mark that refuses fences from a stale primary
// (Timeline, TimelineMark, ErrStaleTimeline), which pglease checks its grants
// against and pgguard its writes.
//
// The packages that do the work are pglease (leases and fences), pgguard
// (fenced writes), claim (job rows), lockless, advisory, payouts and
// migrations; this one imports none of them.
package pgfence
