// Package payouts makes a side effect that knows no fences, such as a payment
// provider's API, safe to retry under a lease: a durable intent per payout in
// payout_intents, an idempotency key derived once from the payout id and sent
// on every attempt, fenced transitions PENDING -> SUBMITTING -> SUBMITTED or
// FAILED, and [Intents.Stuck] for reconciling attempts whose outcome nobody
// recorded. Each transition is a guarded write with the holder's fence; one
// that changes no row is explained with pgguard's errors. The fence stops a
// stale holder from recording; only the idempotency key makes the provider
// call itself harmless to repeat.
package payouts
