// Package example is the scaffolding the runnable examples (the demo among
// them) share: a fresh, migrated database of their own, a timeline printer,
// and the verdict line.
//
// Every example's main is one call:
//
//	func main() { example.Main("scheduled billing", run) }
//
// Main resolves the server the way the tests do (package dbenv):
// PGFENCE_DATABASE_URL, then DATABASE_URL, else a throwaway PostgreSQL
// started from local binaries, announced on stderr and removed on exit,
// Ctrl-C included. On that server it creates a database of the
// example's own (or, when the role may not create databases, a schema in the
// URL's database), applies pgfence's migrations, runs the example, and drops
// it at the end, so a shared server is left as it was found.
//
// The example records what it observed with Verdict.Check; Main prints
// each check on a line of its own, then, as the last line, exactly one
// verdict, "VERDICT: PASS — all N checks held" or "VERDICT: FAIL — M of N
// checks broke: <what broke>", and exits 0 only on PASS.
package example
