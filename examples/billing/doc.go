// Scheduled billing: three instances of a billing service notice every
// minute that invoice inv_72 is due. They compete for the lease
// "invoice:inv_72"; the winner sends, the others skip until the next tick.
// The send is also an idempotent, fenced write (status PENDING -> SENT,
// carrying the lease's fence), so a rare second run — a later tick, or an
// instance that got the lease after the winner released it — is harmless.
//
//	go run ./examples/billing
package main
