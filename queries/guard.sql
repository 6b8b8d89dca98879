-- name: CreatePayout :one
-- Records the intent in state PENDING. The idempotency key is derived once
-- by the caller from the payout id and never changes. No row
-- (pgx.ErrNoRows) means the payout exists already; it is left unchanged.
INSERT INTO /* TEMPLATE: schema */payout_intents (payout_id, amount_cents, currency, idempotency_key)
VALUES (sqlc.arg(payout_id), sqlc.arg(amount_cents), sqlc.arg(currency), sqlc.arg(idempotency_key))
ON CONFLICT (payout_id) DO NOTHING
RETURNING *;

-- name: GetPayout :one
-- One payout intent as stored now; no row (pgx.ErrNoRows) when there is
-- none with this id. It takes no lock and writes nothing.
SELECT * FROM /* TEMPLATE: schema */payout_intents WHERE payout_id = sqlc.arg(payout_id);

-- name: BeginSubmitPayout :one
-- PENDING or SUBMITTING -> SUBMITTING, before calling the provider. Re-entering
-- SUBMITTING is a retry (after a crash, by a newer holder or by the same one):
-- the provider sees the same idempotency key again.
-- It sets the transaction's fence for a fencing trigger on payout_intents,
-- checked against the ceiling of pgfence's source unless own_fence_source is
-- true (its zero value, false, keeps the check). No row (pgx.ErrNoRows) when
-- the payout is missing, in another state, or carries a newer fence (a stale
-- holder): nothing is written then.
UPDATE /* TEMPLATE: schema */payout_intents AS p
   SET state = 'SUBMITTING',
       attempts = p.attempts + 1,
       last_fence = sqlc.arg(fence)::bigint,
       submitting_since = now(),
       updated_at = now()
  FROM (SELECT /* TEMPLATE: schema */pgfence_set_fence(sqlc.arg(fence)::bigint, NOT sqlc.arg(own_fence_source)::boolean)) AS settings
 WHERE p.payout_id = sqlc.arg(payout_id)
   AND p.state IN ('PENDING', 'SUBMITTING')
   AND p.last_fence <= sqlc.arg(fence)::bigint
RETURNING p.*;

-- name: MarkPayoutSubmitted :one
-- SUBMITTING -> SUBMITTED, with what the provider answered.
-- It sets the transaction's fence for a fencing trigger on payout_intents,
-- checked against the ceiling of pgfence's source unless own_fence_source is
-- true (its zero value, false, keeps the check). No row (pgx.ErrNoRows) when
-- the payout is missing, in another state, or carries a newer fence (a stale
-- holder): nothing is written then.
UPDATE /* TEMPLATE: schema */payout_intents AS p
   SET state = 'SUBMITTED',
       provider_ref = sqlc.arg(provider_ref)::text,
       last_fence = sqlc.arg(fence)::bigint,
       updated_at = now()
  FROM (SELECT /* TEMPLATE: schema */pgfence_set_fence(sqlc.arg(fence)::bigint, NOT sqlc.arg(own_fence_source)::boolean)) AS settings
 WHERE p.payout_id = sqlc.arg(payout_id)
   AND p.state = 'SUBMITTING'
   AND p.last_fence <= sqlc.arg(fence)::bigint
RETURNING p.*;

-- name: MarkPayoutFailed :one
-- PENDING or SUBMITTING -> FAILED: the provider refused it, or reconciliation
-- found it never arrived and it is given up.
-- It sets the transaction's fence for a fencing trigger on payout_intents,
-- checked against the ceiling of pgfence's source unless own_fence_source is
-- true (its zero value, false, keeps the check). No row (pgx.ErrNoRows) when
-- the payout is missing, in another state, or carries a newer fence (a stale
-- holder): nothing is written then.
UPDATE /* TEMPLATE: schema */payout_intents AS p
   SET state = 'FAILED',
       failure_reason = sqlc.arg(reason)::text,
       last_fence = sqlc.arg(fence)::bigint,
       updated_at = now()
  FROM (SELECT /* TEMPLATE: schema */pgfence_set_fence(sqlc.arg(fence)::bigint, NOT sqlc.arg(own_fence_source)::boolean)) AS settings
 WHERE p.payout_id = sqlc.arg(payout_id)
   AND p.state IN ('PENDING', 'SUBMITTING')
   AND p.last_fence <= sqlc.arg(fence)::bigint
RETURNING p.*;

-- name: StuckPayouts :many
-- Reconciliation: rows in SUBMITTING whose latest attempt began at least
-- older_than ago by the database clock, oldest first. Ask the provider about
-- each by its idempotency key, then record the answer. At most max_rows
-- rows; it takes no lock and writes nothing.
SELECT * FROM /* TEMPLATE: schema */payout_intents
 WHERE state = 'SUBMITTING'
   AND submitting_since <= now() - sqlc.arg(older_than_micros)::bigint * interval '1 microsecond'
 ORDER BY submitting_since, payout_id
 LIMIT sqlc.arg(max_rows)::integer;
