// Payout: a payment provider knows nothing of fences, so the lock alone
// cannot stop a double payout. The scenario: a worker calls the
// provider, the provider pays, the worker times out before the answer
// arrives, and its lease expires; a second worker legitimately gets the lease
// and retries. What makes that safe:
//
//  1. a stable idempotency key, derived once from the payout id and sent on
//     every attempt: the provider returns the original result for a repeat;
//  2. a durable intent row (package payouts): SUBMITTING is recorded before
//     the call, and every transition carries the holder's fence;
//  3. reconciliation: rows stuck in SUBMITTING are looked up at the provider
//     by key, never guessed.
//
// The provider is a fake HTTP server on 127.0.0.1 that honours the
// Idempotency-Key header and keeps a ledger of the money it moved.
//
//	go run ./examples/payout
package main
