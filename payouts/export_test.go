package payouts

// IdempotencyKey is the key Create stores for a payout id, for tests.
var IdempotencyKey = idempotencyKey
