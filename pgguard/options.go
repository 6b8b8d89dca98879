package pgguard

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/metric"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/catalog"
	"github.com/pgfence/pgfence/internal/guardopts"
	"github.com/pgfence/pgfence/internal/validate"
)

// Option configures NewGuard, RunFenced, SetFence, InstallTrigger and
// TriggerMigration. Each With function says which of them it applies to;
// an option given to a call it does not apply to is refused with
// pgfence.ErrInvalidInput, so a setting is never silently ignored.
type Option struct {
	name string // the With function, for the refusal
	uses calls  // the calls it applies to
	fn   func(*options) error
}

// calls is a set of the functions that take options.
type calls uint8

const (
	callGuard calls = 1 << iota
	callRunFenced
	callSetFence
	callTrigger

	// callsCounting catch stale writes; callsFencing set a fence.
	callsCounting = callGuard | callRunFenced
	callsFencing  = callGuard | callRunFenced | callSetFence
	callsAll      = callsFencing | callTrigger
)

// String names the call, as its option refusals do.
func (c calls) String() string {
	switch c {
	case callGuard:
		return "NewGuard"
	case callRunFenced:
		return "RunFenced"
	case callSetFence:
		return "SetFence"
	default:
		return "InstallTrigger and TriggerMigration"
	}
}

type options struct {
	hook func(context.Context, *StaleFenceError)
	done []Cond // Guard only: the row's final states
	// ownSource: fences come from the caller's own source, so the
	// ceiling of pgfence's source does not apply (WithOwnFenceSource).
	ownSource bool
	// meterProvider: nil for the global one (metrics.go).
	meterProvider metric.MeterProvider
	// schema of pgfence's functions (WithSchema), "" for the search_path;
	// fn is its prefix for a call ("" or `"schema".`).
	schema, fn string
}

// buildOptions applies opts in order over the defaults for call. A zero
// Option (a composite literal instead of a With function) and one that does
// not apply to call are bad input, not a panic or a setting ignored.
func buildOptions(opts []Option, call calls) (options, error) {
	var o options
	for _, opt := range opts {
		switch {
		case opt.fn == nil:
			return o, invalid("zero option: make options with the With functions")
		case opt.uses&call == 0:
			return o, invalid("%s does not apply to %s", opt.name, call)
		}
		if err := opt.fn(&o); err != nil {
			return o, err
		}
	}
	return o, nil
}

func init() {
	guardopts.Read = func(opts any) (guardopts.Settings, error) {
		o, err := buildOptions(opts.([]Option), callGuard)
		return guardopts.Settings{
			Schema:         o.schema,
			OwnFenceSource: o.ownSource,
			Caught: func(ctx context.Context, err error) {
				var se *StaleFenceError
				if errors.As(err, &se) {
					o.caught(ctx, se)
				}
			},
		}, err
	}
}

// WithStaleHook sets a function called, synchronously and after counting,
// with every stale write caught: log it, export it as a metric, page on a
// rising rate. Default: none.
//
// Applies to NewGuard and RunFenced.
func WithStaleHook(fn func(ctx context.Context, e *StaleFenceError)) Option {
	return Option{"WithStaleHook", callsCounting, func(o *options) error {
		if fn == nil {
			return invalid("nil stale hook")
		}
		o.hook = fn
		return nil
	}}
}

// caught counts e and calls the hook; it returns e.
func (o *options) caught(ctx context.Context, e *StaleFenceError) error {
	o.countStale(ctx, e)
	if o.hook != nil {
		o.hook(ctx, e)
	}
	return e
}

// observe classifies err and, when that turns a fencing trigger's refusal
// into a *StaleFenceError, counts it. One that already was a
// *StaleFenceError (from a Guard call inside RunFenced's function)
// was counted where it was made.
func (o *options) observe(ctx context.Context, err error) error {
	var se *StaleFenceError
	if errors.As(err, &se) {
		return err
	}
	err = Classify(err)
	if errors.As(err, &se) {
		o.caught(ctx, se)
	}
	return err
}

// WithDoneWhen tells a Guard which row states are final: when a guarded
// write's preconditions fail and the row matches all of done (for example
// Eq("status", "SENT")), the ErrPrecondition error also satisfies
// ErrAlreadyDone, so the caller can tell "the work is already done" from
// "not ready yet" without re-reading. Default: none (ErrPrecondition only).
//
// Applies to NewGuard.
func WithDoneWhen(done ...Cond) Option {
	return Option{"WithDoneWhen", callGuard, func(o *options) error {
		if len(done) == 0 {
			return invalid("WithDoneWhen needs at least one condition")
		}
		o.done = done
		return nil
	}}
}

// WithOwnFenceSource says that the fences given to a Guard, RunFenced or
// SetFence come from a source of your own (an epoch, a term, a
// revision of another system), not from pgfence's (pglease, claim,
// pgfence_next_fence()). It turns off the fence ceiling: by default, a fence
// above the highest one pgfence's source has issued so far
// (pgfence_fence_ceiling()) is refused with ErrFenceAboveCeiling, because a
// made-up fence that high would lock every real holder out of the rows it
// wrote. Default: off (the ceiling is checked).
//
// Applies to NewGuard, RunFenced and SetFence.
func WithOwnFenceSource() Option {
	return Option{"WithOwnFenceSource", callsFencing, func(o *options) error {
		o.ownSource = true
		return nil
	}}
}

// WithSchema names the schema of the pgfence functions to call
// (pgfence_set_fence, pgfence_fence_ceiling, pgfence_enforce_fence): the one
// given to migrations.WithSchema. The calls are then schema-qualified, so
// they need no search_path and work behind a transaction pooler. Default:
// found through the search_path. The guarded table is not affected (see
// Table.Schema). A name that is not a plain identifier is refused with
// pgfence.ErrInvalidInput.
//
// Applies to every function that takes options.
func WithSchema(schema string) Option {
	return Option{"WithSchema", callsAll, func(o *options) error {
		if err := validate.Identifier("schema", schema); err != nil {
			return invalid("%v", err)
		}
		o.schema, o.fn = schema, pgx.Identifier{schema}.Sanitize()+"."
		return nil
	}}
}

// checkSchema makes sure, when WithSchema named a schema, that pgfence's
// migrations ran there, so that a Guard on a wrong schema fails when it is
// made, saying what to run, not at its first write.
func (o *options) checkSchema(ctx context.Context, db pgfence.DBTX) error {
	if o.schema == "" {
		return nil
	}
	ok, err := catalog.FunctionExists(ctx, db, o.fn+"pgfence_set_fence(bigint,boolean)")
	if err != nil {
		return fmt.Errorf("pgguard: looking for pgfence's functions in schema %q: %w", o.schema, err)
	}
	if !ok {
		return fmt.Errorf("pgguard: pgfence's functions are missing from schema %q: run `pgfence migrate up --schema %s` or migrations.Up with migrations.WithSchema", o.schema, o.schema)
	}
	return nil
}

// setFenceCall is the SQL call that sets the transaction's fence, bound to
// the transaction, with the ceiling checked unless the
// fences come from a source of the caller's own.
func (o *options) setFenceCall(fenceParam string) string {
	return o.fn + "pgfence_set_fence(" + fenceParam + "::bigint, " + strconv.FormatBool(!o.ownSource) + ")"
}
