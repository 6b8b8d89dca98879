// Package dbenv finds a PostgreSQL server for the tests (and starts the
// demo's throwaway server, examples/internal/throwaway), in this order:
//
//  1. an explicit URL: PGFENCE_DATABASE_URL, then DATABASE_URL;
//  2. a throwaway cluster started from locally installed PostgreSQL binaries
//     (initdb and postgres, found on PATH or under /usr/lib/postgresql/*/bin),
//     in a temporary directory, listening only on a Unix socket there, and
//     removed on Close. As root it runs as the unprivileged user "postgres",
//     since PostgreSQL refuses to run as root;
//  3. when a Docker engine answers, a container started by the program in
//     tools/dbcontainer (testcontainers-go, in a module of its own, so that
//     neither the CLI nor a user's build links or downloads it), which dbenv
//     runs with `go run` and stops on Close.
//
// If none works, Open fails with an error that says how to provide one.
//
// A test binary killed outright cannot remove its cluster: each cluster's
// directory records its owner's PID, and the next Open removes the
// directories whose owner and server are both gone.
//
// The throwaway cluster is tuned for speed (fsync=off): it is for tests and
// demos, never for data you keep.
package dbenv
