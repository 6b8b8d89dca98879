-- Statements of package advisory. PostgreSQL has two advisory key spaces, a
-- bigint and a pair of integers, with a function of each form: every
-- statement comes in both, *Int64 and *Pair. The transaction-level lock
-- statements return whether the key was granted and the server session's
-- pid (which tells whether a connection pooler is in between).

-- name: AdvisoryTryXactLockInt64 :one
SELECT pg_try_advisory_xact_lock(sqlc.arg(key)::bigint) AS granted, pg_backend_pid() AS pid;

-- name: AdvisoryTryXactLockPair :one
SELECT pg_try_advisory_xact_lock(sqlc.arg(namespace)::integer, sqlc.arg(id)::integer) AS granted, pg_backend_pid() AS pid;

-- name: AdvisoryXactLockInt64 :one
-- pg_advisory_xact_lock returns void and only returns once the key is
-- granted; called in FROM, it yields one row, so both forms scan alike.
SELECT true AS granted, pg_backend_pid() AS pid FROM pg_advisory_xact_lock(sqlc.arg(key)::bigint);

-- name: AdvisoryXactLockPair :one
SELECT true AS granted, pg_backend_pid() AS pid FROM pg_advisory_xact_lock(sqlc.arg(namespace)::integer, sqlc.arg(id)::integer);

-- name: AdvisoryFunctionSavepoint :exec
-- Set right after the lock, in the same round trip: the function runs inside
-- it, so a failing statement aborts only the savepoint, not the transaction
-- that holds the key (an aborted transaction releases its locks at once,
-- before the ROLLBACK that ends it).
SAVEPOINT pgfence_advisory_fn;

-- name: AdvisoryFunctionRelease :exec
RELEASE SAVEPOINT pgfence_advisory_fn;

-- name: AdvisoryFunctionRollback :exec
ROLLBACK TO SAVEPOINT pgfence_advisory_fn;

-- name: AdvisoryTryLockInt64 :one
SELECT pg_try_advisory_lock(sqlc.arg(key)::bigint);

-- name: AdvisoryTryLockPair :one
SELECT pg_try_advisory_lock(sqlc.arg(namespace)::integer, sqlc.arg(id)::integer);

-- name: AdvisoryLockInt64 :exec
SELECT pg_advisory_lock(sqlc.arg(key)::bigint);

-- name: AdvisoryLockPair :exec
SELECT pg_advisory_lock(sqlc.arg(namespace)::integer, sqlc.arg(id)::integer);

-- name: AdvisoryUnlockInt64 :exec
SELECT pg_advisory_unlock(sqlc.arg(key)::bigint);

-- name: AdvisoryUnlockPair :exec
SELECT pg_advisory_unlock(sqlc.arg(namespace)::integer, sqlc.arg(id)::integer);

-- name: AdvisorySessionHolds :one
-- Whether this session holds the advisory lock whose pg_locks tag is
-- (classid, objid, objsubid).
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_locks
		WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
		  AND classid = sqlc.arg(classid)::bigint::oid AND objid = sqlc.arg(objid)::bigint::oid AND objsubid = sqlc.arg(objsubid));
