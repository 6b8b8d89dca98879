// Package story is the scaffolding the runnable examples (the demo among
// them) share: a fresh, migrated database of their own, a timeline printer,
// and the verdict line. It imports only pgfence's public packages, pgx and
// the standard library, so an example's main.go, copied into a project of
// your own, compiles there after go get github.com/pgfence/pgfence.
//
// Every example's main is one call:
//
//	func main() { story.Main("scheduled billing", run) }
//
// Main finds a PostgreSQL server in this order:
//
//  1. PGFENCE_DATABASE_URL, then DATABASE_URL: the server it names. If it
//     cannot be reached, Main fails and tries nothing else.
//  2. Else libpq's environment, as pgx.ParseConfig("") reads it: PGHOST,
//     PGPORT, PGUSER, PGPASSWORD, PGDATABASE, ~/.pgpass, and libpq's
//     defaults for what is unset (the local Unix socket, the OS user's name
//     as user and database).
//  3. If that connection fails, the Fallback a program registered with
//     SetFallback, after saying on stderr why the connection failed (the
//     demo registers one that starts a throwaway PostgreSQL from the local
//     server binaries and removes it on exit, Ctrl-C included). Without a
//     fallback Main fails with a message that says what to set.
//
// Messages name a server by host, port, user and database, never by its
// password. On that server Main creates a database of the example's own
// (or, when the role may not create databases, a schema in the connection's
// database), applies pgfence's migrations, runs the example, and drops it at
// the end, so a shared server is left as it was found.
//
// The example records what it observed with Verdict.Check; Main prints
// each check on a line of its own, then, as the last line, exactly one
// verdict, "VERDICT: PASS — all N checks held" or "VERDICT: FAIL — M of N
// checks broke: <what broke>", and exits 0 only on PASS.
package story
