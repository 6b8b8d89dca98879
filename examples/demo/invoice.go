package main

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/pgguard"
)

const (
	key = "invoice:inv_72" // the lease every instance asks for
	job = "inv_72"         // the invoice job row it protects
)

// schemaSQL creates the protected resource: the invoice job row with its
// fence column, and the log of invoices sent (what the customer sees).
const schemaSQL = `
CREATE TABLE invoice_jobs (
  job_id     text   PRIMARY KEY,
  status     text   NOT NULL,
  last_fence bigint NOT NULL DEFAULT 0,
  sent_by    text
);
CREATE TABLE invoice_sends (
  id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  job_id  text   NOT NULL,
  worker  text   NOT NULL,
  fence   bigint NOT NULL
);`

// sendUnfenced is what a worker that trusts its lock does: it decided from
// what it read while it held the lease, and writes.
const sendUnfenced = `
WITH w AS (
  UPDATE invoice_jobs SET status = 'SENT', sent_by = $2
   WHERE job_id = $3
  RETURNING job_id)
INSERT INTO invoice_sends (job_id, worker, fence) SELECT job_id, $2, $1 FROM w`

// outcome is what became of one attempt to send the invoice.
type outcome struct {
	sent    bool
	refusal error // why the resource refused it (pgguard's error), if it did
	current int64 // the row's fence when a stale write was refused
}

// send sends inv_72 as worker, with or without the fence.
func send(ctx context.Context, db *pgxpool.Pool, fenced bool, worker string, fence int64) (outcome, error) {
	if !fenced {
		tag, err := db.Exec(ctx, sendUnfenced, fence, worker, job)
		return outcome{sent: tag.RowsAffected() == 1}, err
	}
	return sendFenced(ctx, db, worker, fence)
}

// sendFenced is pgguard's guarded write (UPDATE ... SET status = 'SENT',
// last_fence = fence WHERE job_id = ... AND last_fence <= fence AND status =
// 'PENDING') with the send recorded in the same transaction, so the send
// happens only if the write counts.
func sendFenced(ctx context.Context, db *pgxpool.Pool, worker string, fence int64) (outcome, error) {
	guard, err := pgguard.NewGuard(ctx, db, pgguard.Table{Name: "invoice_jobs", KeyColumn: "job_id"})
	if err != nil {
		return outcome{}, err
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return outcome{}, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	err = guard.Update(ctx, tx, job, fence, pgguard.Values{"status": "SENT", "sent_by": worker}, pgguard.Eq("status", "PENDING"))
	if stale := (*pgguard.StaleFenceError)(nil); errors.As(err, &stale) {
		return outcome{refusal: err, current: stale.Current}, nil
	}
	if errors.Is(err, pgguard.ErrPrecondition) {
		return outcome{refusal: err}, nil
	}
	if err != nil {
		return outcome{}, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO invoice_sends (job_id, worker, fence) VALUES ($1, $2, $3)`, job, worker, fence); err != nil {
		return outcome{}, err
	}
	return outcome{sent: true}, tx.Commit(ctx)
}

// resetJob makes inv_72 due again, with no invoice sent.
func resetJob(ctx context.Context, db *pgxpool.Pool) error {
	_, err := db.Exec(ctx, `TRUNCATE invoice_jobs, invoice_sends;
		INSERT INTO invoice_jobs (job_id, status) VALUES ('`+job+`', 'PENDING')`)
	return err
}

// sendRow is one invoice the customer received.
type sendRow struct {
	worker string
	fence  int64
}

// sends reads back the invoices sent, in order.
func sends(ctx context.Context, db *pgxpool.Pool) ([]sendRow, error) {
	rows, err := db.Query(ctx, `SELECT worker, fence FROM invoice_sends WHERE job_id = $1 ORDER BY id`, job)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (sendRow, error) {
		var s sendRow
		return s, r.Scan(&s.worker, &s.fence)
	})
}

// jobRow reads inv_72's status and fence.
func jobRow(ctx context.Context, db *pgxpool.Pool) (status string, fence int64, err error) {
	err = db.QueryRow(ctx, `SELECT status, last_fence FROM invoice_jobs WHERE job_id = $1`, job).Scan(&status, &fence)
	return status, fence, err
}
