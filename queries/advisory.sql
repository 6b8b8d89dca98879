-- Statements of package advisory. PostgreSQL has two advisory key spaces, a
-- bigint and a pair of integers, with a function of each form: every
-- statement comes in both, *Int64 and *Pair. The transaction-level lock
-- statements also return the server session's pid and the transaction's
-- start time, which together name the transaction that holds the key.

-- name: AdvisoryTryXactLockInt64 :one
SELECT pg_try_advisory_xact_lock(sqlc.arg(key)::bigint), pg_backend_pid(), now();

-- name: AdvisoryTryXactLockPair :one
SELECT pg_try_advisory_xact_lock(sqlc.arg(namespace)::integer, sqlc.arg(id)::integer), pg_backend_pid(), now();

-- name: AdvisoryXactLockInt64 :one
-- pg_advisory_xact_lock returns void: IS NULL turns it into a boolean
-- (always true) so that both forms scan alike.
SELECT pg_advisory_xact_lock(sqlc.arg(key)::bigint) IS NULL, pg_backend_pid(), now();

-- name: AdvisoryXactLockPair :one
SELECT pg_advisory_xact_lock(sqlc.arg(namespace)::integer, sqlc.arg(id)::integer) IS NULL, pg_backend_pid(), now();

-- name: AdvisoryStillInTransaction :one
-- Whether this statement runs in the transaction that took a key: the same
-- server session (its pid) and the same transaction start time.
SELECT pg_backend_pid() = sqlc.arg(pid)::integer AND now() = sqlc.arg(xact_start)::timestamptz;

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
