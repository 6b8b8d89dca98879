// Package dbenv finds a PostgreSQL server for the tests, the CLI demo and the
// examples, so that all three resolve it the same way, in this order:
//
//  1. an explicit URL: PGFENCE_DATABASE_URL, then DATABASE_URL;
//  2. a throwaway cluster started from locally installed PostgreSQL binaries
//     (initdb and postgres, found on PATH or under /usr/lib/postgresql/*/bin),
//     in a temporary directory, listening only on a Unix socket there, and
//     removed on Close. As root it runs as the unprivileged user "postgres",
//     since PostgreSQL refuses to run as root;
//  3. testcontainers-go's postgres module, when a Docker engine answers.
//
// If none works, Open fails with an error that says how to provide one.
//
// The throwaway cluster is tuned for speed (fsync=off): it is for tests and
// demos, never for data you keep.
package dbenv
