// Invoice dedup: the database guarantees one invoice per customer and
// billing period with a unique constraint, whichever worker gets there first
// and however many are paused. No lock at all: every worker runs
//
//	INSERT INTO invoices (customer_id, billing_period) VALUES (...)
//	ON CONFLICT (customer_id, billing_period) DO NOTHING
//	RETURNING invoice_id
//
// and exactly one gets a row back; the others get zero and skip. Package
// lockless (InsertOnce) issues that statement on your own table, and tells a
// loser which row won.
//
//	go run ./examples/invoicedup
package main
