// Package lockless keeps an invariant in the database, checked and written in
// one statement, so that no lock is needed.
//
//   - Dedup by unique constraint ([InsertOnce]): INSERT ... ON CONFLICT DO
//     NOTHING RETURNING. However many callers race, and however long any of
//     them pauses, exactly one creates the row, and each caller learns whether
//     it was the one. For example: one invoice per (customer_id,
//     billing_period).
//   - Check-and-update in one statement ([Counter]): UPDATE ... SET quantity =
//     quantity - n WHERE key = $1 AND quantity >= n. The check and the
//     decrement cannot be separated, so stock is never oversold and never
//     negative.
//   - Optimistic concurrency on a version column ([Versioned]): UPDATE ... SET
//     ..., version = version + 1 WHERE key = $1 AND version = $read. Zero
//     rows is a *[ConflictError]: someone wrote since you read; read again and
//     decide again.
//
// The helpers work on the caller's own tables. Their constructors check the
// table and columns against the catalog, refuse unsafe identifiers (empty,
// over 63 bytes, invalid UTF-8, NUL or control characters, surrounding
// spaces) with [ErrInvalidInput], and quote every identifier with
// pgx.Identifier.Sanitize; values are always bound parameters. Every method
// takes a fencedb.DBTX, so it runs on a pool, a connection or inside the
// caller's transaction ([Querier] is a deprecated alias of it).
//
// None of this makes an external call (a payment, an e-mail) happen once:
// pair such calls with an idempotency key derived from the deduplicated row.
package lockless
