// Package lockless keeps an invariant in the database, checked and written in
// one statement, so that no lock is needed: [InsertOnce] creates a row once
// under a unique constraint however many callers race, and tells each whether
// it was the one; [Counter] checks and decrements a quantity in one UPDATE, so
// it never goes below zero; [Versioned] writes only if nobody wrote since the
// version read, and reports a [ConflictError] otherwise. They work on your own
// tables, checked against the catalog, with every identifier quoted and every
// value bound. None of this makes an external call happen once: pair such a
// call with an idempotency key derived from the deduplicated row.
package lockless
