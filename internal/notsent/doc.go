// Package notsent tells a statement that was never sent from one whose
// answer was lost.
//
// pglease settles an acquisition whose outcome is unknown (sent, no answer)
// by asking the server again and giving back whatever it granted. Through a
// pool, the first thing a statement does is take a connection; when the
// caller's context ends there, pgxpool returns the bare context error, which
// pgx's own classifier (pgconn.SafeToRetry) cannot tell from a statement cut
// off in flight. Treated as ambiguous, such a timeout wrote a needless
// tombstone and kept its caller up to the resolve bound (5 s) past its
// deadline, on a pool that was already exhausted.
//
// Wrap takes the connection itself, before the statement, and marks an error
// in taking it (Is reports it): nothing of that statement reached the server.
// It costs nothing over the pool's own QueryRow, which does the same steps.
package notsent
