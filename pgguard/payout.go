package pgguard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/pgmode"
	"github.com/pgfence/pgfence/internal/validate"
)

// PayoutState is the state of a payout intent.
type PayoutState string

// The states of a payout intent. PENDING -> SUBMITTING -> SUBMITTED or
// FAILED; SUBMITTING may be re-entered (a retry), and PENDING may go straight
// to FAILED (given up before any attempt).
const (
	// PayoutPending: recorded, not yet sent to the provider.
	PayoutPending PayoutState = "PENDING"
	// PayoutSubmitting: an attempt may be in flight; the provider may or may
	// not have acted on it. Only the provider, asked by idempotency key, can
	// say (see Payouts.Stuck).
	PayoutSubmitting PayoutState = "SUBMITTING"
	// PayoutSubmitted: the provider accepted it. Final.
	PayoutSubmitted PayoutState = "SUBMITTED"
	// PayoutFailed: the provider refused it, or it was given up. Final.
	PayoutFailed PayoutState = "FAILED"
)

// Final reports whether no transition leaves s: the work is done.
func (s PayoutState) Final() bool { return s == PayoutSubmitted || s == PayoutFailed }

// PayoutTable is the table that holds payout intents (migration 000002), as
// the errors and counters of Payouts name it.
const PayoutTable = "payout_intents"

// Payout is one payout intent: the durable record, written before the
// provider is called, of a side effect that the provider cannot fence.
type Payout struct {
	ID          string
	AmountCents int64
	Currency    string
	State       PayoutState
	// IdempotencyKey was derived once from ID when the intent was recorded
	// (PayoutIdempotencyKey) and never changes: send it on every attempt,
	// so that the provider returns the first attempt's result for a repeat.
	IdempotencyKey string
	// ProviderRef is the provider's reference, once SUBMITTED.
	ProviderRef string
	// FailureReason says why, once FAILED.
	FailureReason string
	// Attempts counts entries into SUBMITTING.
	Attempts int
	// LastFence is the fence of the newest holder that moved it.
	LastFence int64
	CreatedAt time.Time
	UpdatedAt time.Time
	// SubmittingSince is when the latest attempt entered SUBMITTING, by the
	// database clock; zero if none did.
	SubmittingSince time.Time
}

func payoutFrom(p fencedb.PayoutIntent) Payout {
	out := Payout{
		ID: p.PayoutID, AmountCents: p.AmountCents, Currency: p.Currency,
		State: PayoutState(p.State), IdempotencyKey: p.IdempotencyKey,
		ProviderRef: p.ProviderRef.String, FailureReason: p.FailureReason.String,
		Attempts: int(p.Attempts), LastFence: p.LastFence,
		CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt,
	}
	if p.SubmittingSince != nil {
		out.SubmittingSince = *p.SubmittingSince
	}
	return out
}

// PayoutIdempotencyKey derives the idempotency key of a payout from its id:
// "pgfence-payout-" and 32 hex digits of a SHA-256 of the id. It is stable
// across processes and attempts, so even a payout recorded twice (by
// mistake, after a restore) sends the provider the same key. Payouts.Create
// stores it with the intent; read it from there.
func PayoutIdempotencyKey(id string) string {
	sum := sha256.Sum256([]byte("pgfence/payout/v1\x00" + id))
	return "pgfence-payout-" + hex.EncodeToString(sum[:16])
}

// Payouts records payout intents and moves them through their states, each
// transition a guarded write: it carries the holder's fence and the state it
// starts from, in one statement on the payout_intents table. The holder is
// whoever holds the lease on the payout (for example pglease key
// "payout:<id>"); pass its fence.
//
// The pattern, for a provider that knows nothing of fences:
//
//  1. Create records the intent and its idempotency key, once.
//  2. BeginSubmit moves it to SUBMITTING before the provider is called.
//  3. Call the provider with IdempotencyKey.
//  4. MarkSubmitted or MarkFailed records the answer.
//  5. A reconciliation job takes Stuck rows, asks the provider about each by
//     its idempotency key, and records the answer (or retries with
//     BeginSubmit) under a fence of its own.
//
// The fence stops a stale holder from recording; it cannot stop the provider
// from acting on a call already sent. The idempotency key is what makes that
// call harmless to repeat.
//
// A Payouts is safe for concurrent use and holds no connection: every method
// takes the DBTX to run on, so transitions can run in the caller's
// transaction.
type Payouts struct {
	o options
}

// NewPayouts returns a Payouts. Options: WithCounter, WithStaleHook,
// WithOwnFenceSource.
func NewPayouts(opts ...Option) (*Payouts, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	return &Payouts{o: o}, nil
}

var currencyRE = regexp.MustCompile(`^[A-Z]{3}$`)

func checkText(what, s string, max int) error {
	if err := validate.Text(what, s, max); err != nil {
		return invalid("%v", err)
	}
	return nil
}

func checkPayout(id string, fence int64) error {
	if err := validate.Key(id); err != nil {
		return invalid("payout id: %v", err)
	}
	if fence <= 0 {
		return invalid("fence must be positive, got %d", fence)
	}
	return nil
}

// Create records the intent to pay amountCents of currency (ISO 4217, such as
// "EUR") under id, in state PENDING, with its idempotency key. It is
// idempotent: when the payout exists with the same amount and currency it
// returns it as it is (whatever its state); with another amount or currency
// it returns ErrConflict.
func (p *Payouts) Create(ctx context.Context, db DBTX, id string, amountCents int64, currency string) (Payout, error) {
	if db == nil {
		return Payout{}, invalid("nil DBTX")
	}
	if err := validate.Key(id); err != nil {
		return Payout{}, invalid("payout id: %v", err)
	}
	if amountCents <= 0 {
		return Payout{}, invalid("amount must be positive, got %d cents", amountCents)
	}
	if !currencyRE.MatchString(currency) {
		return Payout{}, invalid("currency %q is not three capital letters (ISO 4217)", currency)
	}
	q := fencedb.New(pgmode.Wrap(db))
	row, err := q.CreatePayout(ctx, fencedb.CreatePayoutParams{
		PayoutID: id, AmountCents: amountCents, Currency: currency, IdempotencyKey: PayoutIdempotencyKey(id),
	})
	if err == nil {
		return payoutFrom(row), nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Payout{}, fmt.Errorf("pgguard: recording payout %q: %w", id, err)
	}
	existing, err := p.Get(ctx, db, id)
	if err != nil {
		return Payout{}, err
	}
	if existing.AmountCents != amountCents || existing.Currency != currency {
		return existing, fmt.Errorf("%w: payout %q is recorded for %d %s, not %d %s",
			ErrConflict, id, existing.AmountCents, existing.Currency, amountCents, currency)
	}
	return existing, nil
}

// Get reads one payout; ErrNoRow if there is none.
func (p *Payouts) Get(ctx context.Context, db DBTX, id string) (Payout, error) {
	if db == nil {
		return Payout{}, invalid("nil DBTX")
	}
	row, err := fencedb.New(pgmode.Wrap(db)).GetPayout(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return Payout{}, fmt.Errorf("%w: no payout %q", ErrNoRow, id)
	}
	if err != nil {
		return Payout{}, fmt.Errorf("pgguard: reading payout %q: %w", id, err)
	}
	return payoutFrom(row), nil
}

// BeginSubmit moves the payout from PENDING (or SUBMITTING: a retry) to
// SUBMITTING under fence, before the provider is called, and returns it: send
// its IdempotencyKey. On zero rows it re-reads the payout on db and returns a
// *StaleFenceError (a newer holder moved it; counted), ErrAlreadyDone (it is
// SUBMITTED or FAILED) or ErrNoRow.
func (p *Payouts) BeginSubmit(ctx context.Context, db DBTX, id string, fence int64) (Payout, error) {
	if err := checkPayout(id, fence); err != nil {
		return Payout{}, err
	}
	return p.transition(ctx, db, id, fence, "begin submitting", func(q *fencedb.Queries) (fencedb.PayoutIntent, error) {
		return q.BeginSubmitPayout(ctx, fencedb.BeginSubmitPayoutParams{Fence: fence, PayoutID: id, OwnFenceSource: p.o.ownSource})
	})
}

// MarkSubmitted records the provider's acceptance: SUBMITTING -> SUBMITTED,
// under fence. On zero rows: a *StaleFenceError, ErrAlreadyDone (it is
// SUBMITTED or FAILED already: a repeated transition), ErrPrecondition (it is
// still PENDING: BeginSubmit was not called) or ErrNoRow.
func (p *Payouts) MarkSubmitted(ctx context.Context, db DBTX, id string, fence int64, providerRef string) (Payout, error) {
	if err := checkPayout(id, fence); err != nil {
		return Payout{}, err
	}
	if err := checkText("provider reference", providerRef, 1024); err != nil {
		return Payout{}, err
	}
	return p.transition(ctx, db, id, fence, "mark submitted", func(q *fencedb.Queries) (fencedb.PayoutIntent, error) {
		return q.MarkPayoutSubmitted(ctx, fencedb.MarkPayoutSubmittedParams{Fence: fence, PayoutID: id, ProviderRef: providerRef, OwnFenceSource: p.o.ownSource})
	})
}

// MarkFailed records that the payout will not happen: PENDING or SUBMITTING
// -> FAILED, under fence, with a reason. Only record it when the provider
// said so, or reconciliation established that it never received the payout:
// a SUBMITTING payout may have been paid. On zero rows: a *StaleFenceError,
// ErrAlreadyDone or ErrNoRow.
func (p *Payouts) MarkFailed(ctx context.Context, db DBTX, id string, fence int64, reason string) (Payout, error) {
	if err := checkPayout(id, fence); err != nil {
		return Payout{}, err
	}
	if err := checkText("failure reason", reason, 4096); err != nil {
		return Payout{}, err
	}
	return p.transition(ctx, db, id, fence, "mark failed", func(q *fencedb.Queries) (fencedb.PayoutIntent, error) {
		return q.MarkPayoutFailed(ctx, fencedb.MarkPayoutFailedParams{Fence: fence, PayoutID: id, Reason: reason, OwnFenceSource: p.o.ownSource})
	})
}

// Stuck returns up to limit payouts in SUBMITTING whose latest attempt began
// at least olderThan ago by the database clock, oldest first: attempts whose
// outcome nobody recorded (the holder crashed, or lost its lease, after
// calling the provider). Reconcile each: take the payout's lease, ask the
// provider by IdempotencyKey, then MarkSubmitted, MarkFailed or BeginSubmit
// again, under the new fence. Never guess.
func (p *Payouts) Stuck(ctx context.Context, db DBTX, olderThan time.Duration, limit int) ([]Payout, error) {
	if db == nil {
		return nil, invalid("nil DBTX")
	}
	if olderThan < 0 {
		return nil, invalid("olderThan must not be negative, got %v", olderThan)
	}
	if limit <= 0 || limit > 10000 {
		return nil, invalid("limit must be in [1, 10000], got %d", limit)
	}
	rows, err := fencedb.New(pgmode.Wrap(db)).StuckPayouts(ctx, fencedb.StuckPayoutsParams{
		OlderThanMicros: olderThan.Microseconds(), MaxRows: int32(limit),
	})
	if err != nil {
		return nil, fmt.Errorf("pgguard: listing stuck payouts: %w", err)
	}
	out := make([]Payout, len(rows))
	for i, r := range rows {
		out[i] = payoutFrom(r)
	}
	return out, nil
}

func (p *Payouts) transition(ctx context.Context, db DBTX, id string, fence int64, op string,
	run func(*fencedb.Queries) (fencedb.PayoutIntent, error)) (Payout, error) {
	if db == nil {
		return Payout{}, invalid("nil DBTX")
	}
	q := fencedb.New(pgmode.Wrap(db))
	row, err := run(q)
	if err == nil {
		return payoutFrom(row), nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		err = Classify(err) // a trigger's refusal, or a fence above the ceiling
		if se, ok := err.(*StaleFenceError); ok {
			se.Key = id
			return Payout{}, p.o.caught(ctx, se)
		}
		return Payout{}, fmt.Errorf("pgguard: payout %q: %s: %w", id, op, err)
	}
	// Zero rows is an answer: re-read to tell which.
	cur, err := p.Get(ctx, db, id)
	if err != nil {
		return Payout{}, err
	}
	switch {
	case cur.LastFence > fence:
		return cur, p.o.caught(ctx, &StaleFenceError{Table: PayoutTable, Key: id, Presented: fence, Current: cur.LastFence})
	case cur.State.Final():
		return cur, &PreconditionError{Table: PayoutTable, Key: id, Fence: fence, State: string(cur.State), Done: true,
			Detail: op + " refused"}
	default:
		return cur, &PreconditionError{Table: PayoutTable, Key: id, Fence: fence, State: string(cur.State),
			Detail: op + " does not start from this state"}
	}
}
