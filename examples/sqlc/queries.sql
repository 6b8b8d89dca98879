-- name: CreateInvoice :exec
INSERT INTO invoices (id, customer, billing_email) VALUES (sqlc.arg(id), sqlc.arg(customer), sqlc.arg(billing_email));

-- name: GetInvoice :one
SELECT id, customer, billing_email, status, last_fence FROM invoices WHERE id = sqlc.arg(id);

-- name: MarkSent :execrows
-- The guarded write: it applies only if no newer fence has written the row
-- (last_fence <= fence) and the row is still PENDING, and it stamps the
-- fence. The ::bigint casts make sqlc type the fence int64 (and use one
-- parameter for both places). Zero rows: ask pgguard.Guard.Check why.
UPDATE invoices
   SET status = 'SENT', last_fence = sqlc.arg(fence)::bigint
 WHERE id = sqlc.arg(id)
   AND last_fence <= sqlc.arg(fence)::bigint
   AND status = 'PENDING';

-- name: ClaimInvoice :one
-- Claim-first: raise the row's fence before the work, so a holder with an
-- older fence is refused from now on, even before this holder's real write.
-- Returns the row's state for the holder to decide on; no row (pgx.ErrNoRows)
-- means a newer fence got there first (or no such row): Guard.Check says which.
UPDATE invoices
   SET last_fence = sqlc.arg(fence)::bigint
 WHERE id = sqlc.arg(id)
   AND last_fence <= sqlc.arg(fence)::bigint
RETURNING status, last_fence;

-- name: SetBillingEmail :execrows
-- The trigger variant: a plain UPDATE with no fence predicate. On a table with
-- pgfence's fencing trigger (pgguard.InstallTrigger) run it inside
-- pgguard.RunFenced: the transaction's fence (pgfence_set_fence) is checked
-- against last_fence and stamped on the row by the trigger.
UPDATE invoices SET billing_email = sqlc.arg(billing_email) WHERE id = sqlc.arg(id);
