// Package watch is the engine of `pgfence serve`: it reads pgfence's tables
// at a fixed interval (queries/internal/serve.sql, one read-only REPEATABLE READ
// transaction per read) and serves the latest read as a live page, as JSON
// and as Prometheus metrics. Requests never reach the database, except
// /healthz, which pings it: the load on the database is one read per
// interval however many viewers and scrapers there are.
//
// # Endpoints (GET and HEAD only; other methods get 405)
//
//	/            a live page (page.html, embedded): leases with holder, fence
//	             and time left by the database clock; queues with counts by
//	             state and the oldest runnable job; the stale-write count and
//	             its change over 1, 5 and 15 minutes. It fetches /api/state
//	             every second and updates in place.
//	/api/state   the latest read as JSON (type State)
//	/metrics     Prometheus text format (version 0.0.4)
//	/healthz     200 "ok" when the database answers a ping within the
//	             timeout; 503 "unavailable: database ...: reason" otherwise
//
// # Metrics
//
// All read off the latest read (Prometheus names; seconds as the unit of
// time, as the _seconds suffix says):
//
//	pgfence_serve_database_up             gauge   1 if the latest read succeeded, else 0
//	pgfence_serve_snapshot_age_seconds    gauge   age of the read the figures below come from
//	pgfence_leases_held                   gauge   leases unexpired by the database clock
//	pgfence_leases_expiring_soon          gauge   of those, expiring within --soon (default 5s)
//	pgfence_lease_fence{key,owner}        gauge   the fence of a held lease
//	pgfence_lease_remaining_seconds{key,owner}
//	                                      gauge   its time left by the database clock; +Inf
//	                                              when its expiry is 'infinity'
//	pgfence_jobs{queue,state}             gauge   rows of pgfence_jobs
//	pgfence_jobs_oldest_runnable_age_seconds{queue}
//	                                      gauge   how long the oldest runnable job (available,
//	                                              run_at passed) has waited, by the database clock
//	pgfence_stale_refusals_total          counter stale writes refused by the fencing trigger
//	pgfence_permits_in_use{key,kind}      gauge   unexpired permits of a semaphore (kind semaphore),
//	                                              shared leases (shared) and the exclusive lease
//	                                              (exclusive, 0 or 1) of a key
//	pgfence_permits{key}                  gauge   the number of permits of a held semaphore key
//	pgfence_exclusive_waiters{key}        gauge   exclusive waiters of a shared/exclusive key
//	pgfence_queue_waiters{key,kind}       gauge   fair waiters in a key's queue (kind lease, permit,
//	                                              shared or exclusive: the queue's)
//
// Cardinality is bounded: pgfence_lease_fence carries at most --limit
// (default 100) keys, the first held keys in key order (a stable set from
// one scrape to the next; compare with pgfence_leases_held to see whether
// keys were left out), and pgfence_jobs and the oldest-runnable age at
// most --limit queues, the permit families at most --limit keys, and
// pgfence_queue_waiters the keys of the first --limit waiters in key order. A fence is exported as a float64, exact below 2^53
// (WAL timelines below 512).
//
// Rows that pgfence's clients do not write (package oddrow) are served,
// never a failed read: their flags are in the JSON ("flags", explained in
// "flag_notes") and on the page.
//
// pgfence_stale_refusals_total is read from the sequence
// pgfence_stale_refusals, which the fencing trigger draws from when it
// refuses a stale write (nextval survives the refused transaction's
// rollback). Where the sequence does not exist, the metric is absent, not
// zero. When a read fails, every database figure is absent (not stale) and
// pgfence_serve_database_up is 0.
package watch
