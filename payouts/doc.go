// Package payouts makes a side effect that knows no fences, such as a
// payment provider's API, safe to retry under a lease: a durable intent row
// per payout, an idempotency key derived once from the payout id and sent on
// every attempt, fenced state transitions, and reconciliation of attempts
// whose outcome nobody recorded.
//
// A payout moves PENDING -> SUBMITTING -> SUBMITTED or FAILED, in the table
// payout_intents (pgfence's migration 000002). Each transition is a guarded
// write in the sense of package pgguard: one UPDATE that carries the
// holder's fence and the state it starts from, and sets the transaction's
// fence (so the fence ceiling and a fencing trigger on the table apply). A
// transition that changes no row is explained by a [pgguard.Guard] on the
// table, so the answers are pgguard's: a *[pgguard.StaleFenceError] (counted
// in a [pgguard.StaleTally]), [pgguard.ErrAlreadyDone], [pgguard.ErrPrecondition]
// or [pgguard.ErrNoRow].
//
// The pattern, for a provider that knows nothing of fences:
//
//  1. [Intents.Create] records the intent and its idempotency key, once.
//  2. [Intents.BeginSubmit] moves it to SUBMITTING, under the holder's fence
//     (for example the fence of pglease key "payout:<id>"), before the
//     provider is called.
//  3. Call the provider with [Payout].IdempotencyKey.
//  4. [Intents.MarkSubmitted] or [Intents.MarkFailed] records the answer.
//  5. A reconciliation job takes [Intents.Stuck] rows, asks the provider about
//     each by its idempotency key, and records the answer (or retries with
//     BeginSubmit) under a fence of its own.
//
// The fence stops a stale holder from recording; it cannot stop the provider
// from acting on a call already sent. The idempotency key is what makes that
// call harmless to repeat.
package payouts
