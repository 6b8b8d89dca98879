// Package pgmode makes pgfence's own statements safe behind a
// transaction-pooling proxy such as PgBouncer (pool_mode = transaction),
// whatever query exec mode the caller's pool uses.
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
package pgmode
