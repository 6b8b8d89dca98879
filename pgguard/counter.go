package pgguard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/metric"

	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/catalog"
	"github.com/pgfence/pgfence/internal/validate"
)

// StaleTally counts stale writes caught, per table, for the Guards and
// RunFenced calls given it WithStaleTally. Each one is a holder that was
// paused or cut off past its lease and that the fence stopped: a number to
// watch, not a bug to silence. It is safe for concurrent use; the zero value
// is ready.
type StaleTally struct {
	mu      sync.Mutex
	total   uint64
	byTable map[string]uint64
	last    *StaleFenceError
}

// Record counts one stale write caught.
func (c *StaleTally) Record(e *StaleFenceError) {
	if e == nil {
		return
	}
	cp := *e
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total++
	if c.byTable == nil {
		c.byTable = map[string]uint64{}
	}
	c.byTable[e.Table]++
	c.last = &cp
}

// Observe records err when it is a stale-fence refusal (from a guarded write
// or the fencing trigger) and returns it classified (see Classify). Pass the
// error of your own SQL through it to count what the trigger caught.
func (c *StaleTally) Observe(err error) error {
	err = Classify(err)
	var se *StaleFenceError
	if errors.As(err, &se) {
		c.Record(se)
	}
	return err
}

// Total is the number of stale writes caught.
func (c *StaleTally) Total() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// ByTable returns a copy of the counts per schema-qualified table.
func (c *StaleTally) ByTable() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.byTable)
}

// Last returns a copy of the last stale write caught, nil if none.
func (c *StaleTally) Last() *StaleFenceError {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil {
		return nil
	}
	cp := *c.last
	return &cp
}

// GuardOption configures NewGuard: WithStaleTally, WithStaleHook,
// WithMeterProvider, WithDoneWhen, WithOwnFenceSource.
type GuardOption interface{ applyGuard(*options) error }

// RunFencedOption configures RunFenced: WithStaleTally, WithStaleHook,
// WithMeterProvider, WithOwnFenceSource.
type RunFencedOption interface{ applyRunFenced(*options) error }

// SetFenceOption configures SetFence: WithOwnFenceSource, WithSchema.
type SetFenceOption interface{ applySetFence(*options) error }

// TriggerOption configures InstallTrigger: WithSchema.
type TriggerOption interface{ applyTrigger(*options) error }

// CountOption is what WithStaleTally, WithStaleHook and WithMeterProvider
// return: it applies to NewGuard and RunFenced, the two that catch stale
// writes.
type CountOption struct{ fn func(*options) error }

func (c CountOption) applyGuard(o *options) error     { return apply(c.fn, o) }
func (c CountOption) applyRunFenced(o *options) error { return apply(c.fn, o) }

// DoneOption is what WithDoneWhen returns: it applies to NewGuard only.
type DoneOption struct{ fn func(*options) error }

func (d DoneOption) applyGuard(o *options) error { return apply(d.fn, o) }

// SourceOption is what WithOwnFenceSource returns: it applies to everything
// that sets a fence (NewGuard, RunFenced, SetFence).
type SourceOption struct{ fn func(*options) error }

func (s SourceOption) applyGuard(o *options) error     { return apply(s.fn, o) }
func (s SourceOption) applyRunFenced(o *options) error { return apply(s.fn, o) }
func (s SourceOption) applySetFence(o *options) error  { return apply(s.fn, o) }

// SchemaOption is what WithSchema returns: it applies to everything that
// calls one of pgfence's functions (NewGuard, RunFenced, SetFence,
// InstallTrigger).
type SchemaOption struct{ fn func(*options) error }

func (s SchemaOption) applyGuard(o *options) error     { return apply(s.fn, o) }
func (s SchemaOption) applyRunFenced(o *options) error { return apply(s.fn, o) }
func (s SchemaOption) applySetFence(o *options) error  { return apply(s.fn, o) }
func (s SchemaOption) applyTrigger(o *options) error   { return apply(s.fn, o) }

// apply runs an option's function; a zero option (a composite literal
// instead of a With function) is bad input, not a panic.
func apply(fn func(*options) error, o *options) error {
	if fn == nil {
		return invalid("zero option: make options with the With functions")
	}
	return fn(o)
}

type options struct {
	tally *StaleTally // nil: none (WithStaleTally)
	hook  func(context.Context, *StaleFenceError)
	done  []Cond // Guard only: the row's final states
	// ownSource: fences come from the caller's own source, so the
	// ceiling of pgfence's source does not apply (WithOwnFenceSource).
	ownSource bool
	// meterProvider: nil for the global one (metrics.go).
	meterProvider metric.MeterProvider
	// schema of pgfence's functions (WithSchema), "" for the search_path;
	// fn is its prefix for a call ("" or `"schema".`).
	schema, fn string
}

// buildOptions applies opts in order over the defaults; nil options are
// skipped. use is the method of the option type the caller takes (such as
// GuardOption.applyGuard).
func buildOptions[O any](opts []O, use func(O, *options) error) (options, error) {
	var o options
	for _, opt := range opts {
		if any(opt) == nil {
			continue
		}
		if err := use(opt, &o); err != nil {
			return o, err
		}
	}
	return o, nil
}

// WithStaleTally sets a tally that stale writes caught are recorded in.
// Default: none (the OpenTelemetry counter and WithStaleHook still see
// every one).
func WithStaleTally(t *StaleTally) CountOption {
	return CountOption{func(o *options) error {
		if t == nil {
			return invalid("nil stale tally")
		}
		o.tally = t
		return nil
	}}
}

// WithStaleHook sets a function called, synchronously and after counting,
// with every stale write caught: log it, export it as a metric, page on a
// rising rate. Default: none.
func WithStaleHook(fn func(ctx context.Context, e *StaleFenceError)) CountOption {
	return CountOption{func(o *options) error {
		if fn == nil {
			return invalid("nil stale hook")
		}
		o.hook = fn
		return nil
	}}
}

// caught counts e and calls the hook; it returns e.
func (o *options) caught(ctx context.Context, e *StaleFenceError) error {
	if o.tally != nil {
		o.tally.Record(e)
	}
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
// Eq("status", "SENT")), the *PreconditionError also satisfies
// ErrAlreadyDone, so the caller can tell "the work is already done" from
// "not ready yet" without re-reading. Default: none (ErrPrecondition only).
func WithDoneWhen(done ...Cond) DoneOption {
	return DoneOption{func(o *options) error {
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
func WithOwnFenceSource() SourceOption {
	return SourceOption{func(o *options) error {
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
// ErrInvalidInput.
func WithSchema(schema string) SchemaOption {
	return SchemaOption{func(o *options) error {
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
func (o *options) checkSchema(ctx context.Context, db fencedb.DBTX) error {
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
