// Package pgdb wraps the database handle every pgfence statement goes
// through. [Wrap] builds, once per client, one DBTX that does three things
// to each statement:
//
//   - it sends the statement in [Mode], safe behind a transaction-pooling
//     proxy such as PgBouncer whatever exec mode the caller's pool uses;
//   - it names the client's schema in the statement text (schema markers,
//     see internal/sqltmpl), and says what to run when pgfence's objects are
//     missing from it ([MissingError]);
//   - on a *pgxpool.Pool, it takes the connection itself, so that a
//     statement that never got one is told from one whose answer was lost
//     ([NotSent]).
//
// # Exec mode
//
// pgx's default mode, QueryExecModeCacheStatement, prepares each statement
// once per client connection under a name derived from its SQL
// ("stmtcache_<hash>") and later executes it by that name. Behind a
// transaction pooler the client connection is served by a different server
// session from one transaction to the next: the name the client believes
// prepared is missing on the new session (26000), or a session already holds
// it from another client (42P05). Wrap prepends Mode to the arguments of
// every statement, and pgx lets that per-call argument win over the pool's
// DefaultQueryExecMode, so pgfence's statements never rely on session state
// and work through a pooler with pgx's defaults.
//
// Mode is QueryExecModeCacheDescribe: each statement goes out as an unnamed
// Parse, Bind and Execute in one round trip, with parameter and result types
// that pgx learned once per connection from the server, so values are
// encoded as the server's types (a json.RawMessage for a jsonb column, an
// int32 for an integer) just as in the default mode. QueryExecModeExec was
// the other candidate; it infers parameter types from Go types, which
// rejects or mis-encodes some values a user may hand to a generic helper
// (a []byte meant for json goes out as bytea), and it was no faster (docs/pgbouncer.md).
// On a pool that reaches PostgreSQL directly, [Auto] lets pglease use the
// pool's own mode ([WrapOwnMode]).
//
// # Schema
//
// The names travel in the statement text, not in a search_path, so the
// rewrite is per client, holds no session state and works behind a
// transaction pooler, where a search_path startup parameter is refused or
// dropped. Each distinct statement text is expanded once per schema and
// cached, so a statement costs one map lookup; with no schema there is no
// lookup. The cache never evicts: wrap with a schema only statements from a
// fixed set (fencedb's and fencesql's), never text built per call.
//
// # Not sent
//
// pglease settles an acquisition whose outcome is unknown (sent, no answer)
// by asking the server again and giving back whatever it granted. Through a
// pool, the first thing a statement does is take a connection; when the
// caller's context ends there, pgxpool returns the bare context error, which
// pgx's own classifier (pgconn.SafeToRetry) cannot tell from a statement cut
// off in flight. Treated as ambiguous, such a timeout wrote a needless
// tombstone and kept its caller up to the resolve bound (5 s) past its
// deadline, on a pool that was already exhausted. Taking the connection
// costs nothing over the pool's own QueryRow, which does the same steps.
package pgdb
