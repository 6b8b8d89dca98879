// Guarding your own sqlc queries: the app keeps its own invoices table and
// its own queries.sql, generated into package appdb by sqlc with pgfence's
// migrations as part of the schema (sqlc.yaml). The run shows:
//
//   - a lease's fence passed to the app's guarded UPDATE (sqlc.arg(fence)::bigint);
//
//   - a stale holder's write changing zero rows, and pgguard.Guard.Check
//     telling "stale fence" from "already done";
//
//   - a job's fence (package claim) and a lease's fence drawn from one source,
//     both guarding the same row, the app's claim-first statement included;
//
//   - one transaction mixing pgfence's generated queries (fencedb) with the
//     app's (appdb);
//
//   - the trigger variant: pgguard.InstallTrigger on the table, the app's
//     plain UPDATE inside pgguard.RunFenced, a stale one refused
//     (pgguard.Classify gives pgguard.ErrStaleFence).
//
//     go run ./examples/sqlc
package main
