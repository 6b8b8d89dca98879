package payouts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/guardopts"
	"github.com/pgfence/pgfence/internal/pgdb"
	"github.com/pgfence/pgfence/internal/validate"
	"github.com/pgfence/pgfence/pgguard"
)

// State is the state of a payout intent.
type State string

// The states of a payout intent. Pending -> Submitting -> Submitted or
// Failed; Submitting may be re-entered (a retry), and Pending may go straight
// to Failed (given up before any attempt).
const (
	// Pending: recorded, not yet sent to the provider.
	Pending State = "PENDING"
	// Submitting: an attempt may be in flight; the provider may or may not
	// have acted on it. Only the provider, asked by idempotency key, can say
	// (see Intents.Stuck).
	Submitting State = "SUBMITTING"
	// Submitted: the provider accepted it. Final.
	Submitted State = "SUBMITTED"
	// Failed: the provider refused it, or it was given up. Final.
	Failed State = "FAILED"
)

// tableName is the table that holds payout intents (created by pgfence's
// migrations), unqualified: it is found on the search_path, like pgfence's
// other objects, unless WithSchema names its schema.
const tableName = "payout_intents"

// Payout is one payout intent: the durable record, written before the
// provider is called, of a side effect that the provider cannot fence.
type Payout struct {
	ID          string
	AmountCents int64
	Currency    string
	State       State
	// IdempotencyKey was derived once from ID when the intent was recorded
	// ("pgfence-payout-" and 32 hex digits of a SHA-256 of the ID, the same
	// in every process) and never changes: send it on every attempt, so
	// that the provider returns the first attempt's result for a repeat.
	IdempotencyKey string
	// ProviderRef is the provider's reference, once Submitted.
	ProviderRef string
	// FailureReason says why, once Failed.
	FailureReason string
	// Attempts counts entries into Submitting.
	Attempts int
	// LastFence is the fence of the newest holder that moved it.
	LastFence int64
	CreatedAt time.Time
	UpdatedAt time.Time
	// SubmittingSince is when the latest attempt entered Submitting, by the
	// database clock; zero if none did.
	SubmittingSince time.Time
}

func payoutFrom(p fencedb.PayoutIntent) Payout {
	out := Payout{
		ID: p.PayoutID, AmountCents: p.AmountCents, Currency: p.Currency,
		State: State(p.State), IdempotencyKey: p.IdempotencyKey,
		ProviderRef: p.ProviderRef.String, FailureReason: p.FailureReason.String,
		Attempts: int(p.Attempts), LastFence: p.LastFence,
		CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt,
	}
	if p.SubmittingSince != nil {
		out.SubmittingSince = *p.SubmittingSince
	}
	return out
}

// idempotencyKey derives the idempotency key of a payout from its id:
// "pgfence-payout-" and 32 hex digits of a SHA-256 of the id. It is stable
// across processes and attempts, so even a payout recorded twice (by
// mistake, after a restore) sends the provider the same key. Create stores
// it with the intent (Payout.IdempotencyKey).
func idempotencyKey(id string) string {
	sum := sha256.Sum256([]byte("pgfence/payout/v1\x00" + id))
	return "pgfence-payout-" + hex.EncodeToString(sum[:16])
}

// config is what the Guard's options set that the Intents' own statements
// need too.
type config struct {
	guardopts.Settings
}

// queries runs the generated statements on db in the configured schema.
func (c *config) queries(db pgfence.DBTX) *fencedb.Queries {
	return fencedb.New(pgdb.Wrap(db, c.Schema))
}

// invalid refuses bad input: errors.Is(err, pgfence.ErrInvalidInput) holds
// (one value for every package, internal/validate).
func invalid(format string, args ...any) error {
	return validate.Invalid("payouts", format, args...)
}

// The transitions' preconditions, and the states in which a payout is done.
var (
	fromPendingOrSubmitting = pgguard.In("state", string(Pending), string(Submitting))
	fromSubmitting          = pgguard.Eq("state", string(Submitting))
	done                    = pgguard.In("state", string(Submitted), string(Failed))
)

// Intents records payout intents and moves them through their states (see
// the package documentation). It is safe for concurrent use and holds no
// connection: every method takes the DBTX to run on, so transitions can run
// in the caller's transaction. A transition refused for a stale fence or
// its precondition (ErrAlreadyDone included) returns, with the error, the
// payout as it is now: its State says where it stands.
type Intents struct {
	guard *pgguard.Guard
	cfg   config
}

// New checks the payout_intents table through db (pgfence's migrations must
// have run) and returns an Intents. It takes the options of the Guard it
// keeps: [pgguard.WithSchema] puts the Intents on the payout_intents table
// and the pgfence functions of that schema (migrated with
// migrations.WithSchema), named qualified in every statement, so no
// search_path is needed and the Intents work behind a transaction pooler;
// [pgguard.WithStaleHook] and [pgguard.WithMeterProvider] also see stale
// transitions refused by the Intents' own statements (counted in
// pgfence.guard.stale, docs/metrics.md); [pgguard.WithOwnFenceSource] turns
// the fence ceiling off for the transitions too. The payouts' final states
// replace any [pgguard.WithDoneWhen]. Without WithSchema, the Guard finds
// the table on db's search_path once, here, as [pgguard.NewGuard] does,
// while the transitions name it unqualified: run them on connections with
// the same search_path.
func New(ctx context.Context, db pgfence.DBTX, opts ...pgguard.Option) (*Intents, error) {
	if db == nil {
		return nil, invalid("nil DBTX")
	}
	s, err := guardopts.Read(opts)
	if err != nil {
		return nil, err
	}
	cfg := config{s}
	// The payouts' final states come last, so that they are the ones the
	// Guard tells done by.
	gopts := append(slices.Clip(opts), pgguard.WithDoneWhen(done))
	g, err := pgguard.NewGuard(ctx, db, pgguard.Table{Schema: cfg.Schema, Name: tableName, KeyColumn: "payout_id"}, gopts...)
	if err != nil {
		return nil, fmt.Errorf("payouts: %w", pgdb.Hint(err, cfg.Schema))
	}
	return &Intents{guard: g, cfg: cfg}, nil
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
// "EUR") under id, in state Pending, with its idempotency key. It is
// idempotent: when the payout exists with the same amount and currency it
// returns it as it is (whatever its state); with another amount or currency
// it returns pgfence.ErrConflict.
func (p *Intents) Create(ctx context.Context, db pgfence.DBTX, id string, amountCents int64, currency string) (Payout, error) {
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
	q := p.cfg.queries(db)
	row, err := q.CreatePayout(ctx, fencedb.CreatePayoutParams{
		PayoutID: id, AmountCents: amountCents, Currency: currency, IdempotencyKey: idempotencyKey(id),
	})
	if err == nil {
		return payoutFrom(row), nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Payout{}, fmt.Errorf("payouts: recording payout %q: %w", id, err)
	}
	existing, err := p.Get(ctx, db, id)
	if err != nil {
		return Payout{}, err
	}
	if existing.AmountCents != amountCents || existing.Currency != currency {
		return existing, fmt.Errorf("%w: payout %q is recorded for %d %s, not %d %s",
			pgfence.ErrConflict, id, existing.AmountCents, existing.Currency, amountCents, currency)
	}
	return existing, nil
}

// Get reads one payout; an error satisfying [pgfence.ErrNotFound] if there is
// none.
func (p *Intents) Get(ctx context.Context, db pgfence.DBTX, id string) (Payout, error) {
	if db == nil {
		return Payout{}, invalid("nil DBTX")
	}
	row, err := p.cfg.queries(db).GetPayout(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return Payout{}, fmt.Errorf("%w: no payout %q", pgfence.ErrNotFound, id)
	}
	if err != nil {
		return Payout{}, fmt.Errorf("payouts: reading payout %q: %w", id, err)
	}
	return payoutFrom(row), nil
}

// BeginSubmit moves the payout from Pending (or Submitting: a retry) to
// Submitting under fence, before the provider is called, and returns it: send
// its IdempotencyKey. When it changes no row, it says why as a Guard's
// guarded write does ([pgguard.Guard.Check]): a *pgguard.StaleFenceError (a
// newer holder moved it; counted), [pgguard.ErrAlreadyDone] (it is Submitted
// or Failed) or [pgfence.ErrNotFound].
func (p *Intents) BeginSubmit(ctx context.Context, db pgfence.DBTX, id string, fence int64) (Payout, error) {
	if err := checkPayout(id, fence); err != nil {
		return Payout{}, err
	}
	return p.transition(ctx, db, id, fence, "begin submitting", fromPendingOrSubmitting, func(q *fencedb.Queries) (fencedb.PayoutIntent, error) {
		return q.BeginSubmitPayout(ctx, fencedb.BeginSubmitPayoutParams{Fence: fence, PayoutID: id, OwnFenceSource: p.cfg.OwnFenceSource})
	})
}

// MarkSubmitted records the provider's acceptance: Submitting -> Submitted,
// under fence. On zero rows: a *pgguard.StaleFenceError,
// [pgguard.ErrAlreadyDone] (it is Submitted or Failed already: a repeated
// transition), [pgguard.ErrPrecondition] (it is still Pending: BeginSubmit
// was not called) or [pgfence.ErrNotFound].
func (p *Intents) MarkSubmitted(ctx context.Context, db pgfence.DBTX, id string, fence int64, providerRef string) (Payout, error) {
	if err := checkPayout(id, fence); err != nil {
		return Payout{}, err
	}
	if err := checkText("provider reference", providerRef, 1024); err != nil {
		return Payout{}, err
	}
	return p.transition(ctx, db, id, fence, "mark submitted", fromSubmitting, func(q *fencedb.Queries) (fencedb.PayoutIntent, error) {
		return q.MarkPayoutSubmitted(ctx, fencedb.MarkPayoutSubmittedParams{Fence: fence, PayoutID: id, ProviderRef: providerRef, OwnFenceSource: p.cfg.OwnFenceSource})
	})
}

// MarkFailed records that the payout will not happen: Pending or Submitting
// -> Failed, under fence, with a reason. Only record it when the provider
// said so, or reconciliation established that it never received the payout:
// a Submitting payout may have been paid. On zero rows: a
// *pgguard.StaleFenceError, [pgguard.ErrAlreadyDone] or [pgfence.ErrNotFound].
func (p *Intents) MarkFailed(ctx context.Context, db pgfence.DBTX, id string, fence int64, reason string) (Payout, error) {
	if err := checkPayout(id, fence); err != nil {
		return Payout{}, err
	}
	if err := checkText("failure reason", reason, 4096); err != nil {
		return Payout{}, err
	}
	return p.transition(ctx, db, id, fence, "mark failed", fromPendingOrSubmitting, func(q *fencedb.Queries) (fencedb.PayoutIntent, error) {
		return q.MarkPayoutFailed(ctx, fencedb.MarkPayoutFailedParams{Fence: fence, PayoutID: id, Reason: reason, OwnFenceSource: p.cfg.OwnFenceSource})
	})
}

// Stuck returns up to limit payouts in Submitting whose latest attempt began
// at least olderThan ago by the database clock, oldest first: attempts whose
// outcome nobody recorded (the holder crashed, or lost its lease, after
// calling the provider). Reconcile each: take the payout's lease, ask the
// provider by IdempotencyKey, then MarkSubmitted, MarkFailed or BeginSubmit
// again, under the new fence. Never guess.
func (p *Intents) Stuck(ctx context.Context, db pgfence.DBTX, olderThan time.Duration, limit int) ([]Payout, error) {
	if db == nil {
		return nil, invalid("nil DBTX")
	}
	if olderThan < 0 {
		return nil, invalid("olderThan must not be negative, got %v", olderThan)
	}
	if limit <= 0 || limit > 10000 {
		return nil, invalid("limit must be in [1, 10000], got %d", limit)
	}
	rows, err := p.cfg.queries(db).StuckPayouts(ctx, fencedb.StuckPayoutsParams{
		OlderThanMicros: olderThan.Microseconds(), MaxRows: int32(limit),
	})
	if err != nil {
		return nil, fmt.Errorf("payouts: listing stuck payouts: %w", err)
	}
	out := make([]Payout, len(rows))
	for i, r := range rows {
		out[i] = payoutFrom(r)
	}
	return out, nil
}

// transition runs one guarded transition (run: the UPDATE with the fence
// predicate, the precondition from, and the transaction's fence, in one
// statement) and, when it changes no row, lets the Guard decide why.
func (p *Intents) transition(ctx context.Context, db pgfence.DBTX, id string, fence int64, op string, from pgguard.Cond,
	run func(*fencedb.Queries) (fencedb.PayoutIntent, error)) (Payout, error) {
	if db == nil {
		return Payout{}, invalid("nil DBTX")
	}
	row, err := run(p.cfg.queries(db))
	if err == nil {
		return payoutFrom(row), nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Payout{}, p.refused(ctx, id, op, err)
	}
	// Zero rows is an answer: the Guard re-reads the row on db and says
	// which (stale first, then the precondition, done or not).
	err = p.guard.Check(ctx, db, id, fence, from)
	if err == nil {
		err = fmt.Errorf("%w for %s key %q (fence %d): the payout did not match when the transition ran and matches now: it changed concurrently; re-read it before deciding",
			pgguard.ErrPrecondition, p.guard.Table(), id, fence)
	}
	precondition := errors.Is(err, pgguard.ErrPrecondition)
	var se *pgguard.StaleFenceError
	if !precondition && !errors.As(err, &se) {
		return Payout{}, err // no such payout, the ceiling, or the database
	}
	cur, gerr := p.Get(ctx, db, id)
	if gerr != nil {
		return Payout{}, gerr
	}
	if precondition {
		err = fmt.Errorf("payouts: %s: %w (state is %s)", op, err, cur.State)
	}
	return cur, err
}

// refused classifies an error of a transition's statement: a fencing
// trigger's refusal on the table is counted, as the Guard counts its own.
func (p *Intents) refused(ctx context.Context, id, op string, err error) error {
	err = pgguard.Classify(err) // a trigger's refusal, or a fence above the ceiling
	if se, ok := err.(*pgguard.StaleFenceError); ok {
		se.Key = id
		p.cfg.Caught(ctx, se)
		return se
	}
	return fmt.Errorf("payouts: payout %q: %s: %w", id, op, err)
}
