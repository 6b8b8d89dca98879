// Command pgfence runs commands under PostgreSQL leases with fencing tokens
// (exec, like flock with a fence), shows leases (list, show), sizes TTLs
// (plan), serves a read-only live page with Prometheus metrics (serve),
// manages pgfence's schema (migrate) and checks a deployment (doctor, verify).
//
//	pgfence [--database-url URL] [--schema NAME] COMMAND [FLAGS] [ARGS]
//
// `pgfence --help` and `pgfence COMMAND --help` describe every command, flag
// and exit code; docs/cli.md in the repository is the guide. Passwords are
// never printed.
package main
