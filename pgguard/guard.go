package pgguard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/pgdb"
)

// Guard guards writes to one of the caller's tables: a write carries the
// holder's fence, atomically with the change, and a newer holder's fence
// locks older ones out. Make one with NewGuard; it is safe for concurrent use
// and holds no connection.
type Guard struct {
	t      *resolved
	key    string // unquoted names
	fence  string
	qKey   string // quoted
	qFence string
	opts   options
	met    *guardMetrics // OpenTelemetry instruments (metrics.go)
}

// NewGuard checks t against the catalog through db and returns a Guard for
// it. It refuses, with an error satisfying pgfence.ErrInvalidInput and before any
// write: names that are empty, longer than 63 bytes, or contain quotes,
// semicolons, backslashes, control characters, whitespace other than an
// inner space, or comment markers; a table that does not exist; a key column that does not exist or
// has no unique index of its own; a fence column that does not exist or is
// not bigint NOT NULL. The schema is resolved once, here: a later change of
// search_path does not move the Guard to another table.
func NewGuard(ctx context.Context, db pgfence.DBTX, t Table, opts ...Option) (*Guard, error) {
	if db == nil {
		return nil, invalid("nil DBTX")
	}
	o, err := buildOptions(opts, callGuard)
	if err != nil {
		return nil, err
	}
	if err := t.check(true); err != nil {
		return nil, err
	}
	if err := o.checkSchema(ctx, db); err != nil {
		return nil, err
	}
	r, err := resolve(ctx, db, t)
	if err != nil {
		return nil, err
	}
	if err := r.fenceColumn(t.fenceColumn()); err != nil {
		return nil, err
	}
	if err := r.uniqueKey(ctx, db, t.KeyColumn); err != nil {
		return nil, err
	}
	g := &Guard{
		t: r, key: t.KeyColumn, fence: t.fenceColumn(),
		qKey: pgx.Identifier{t.KeyColumn}.Sanitize(), qFence: pgx.Identifier{t.fenceColumn()}.Sanitize(),
		opts: o,
	}
	g.met = newGuardMetrics(o, r.display)
	if _, err := g.conds(&builder{}, o.done); len(o.done) > 0 && err != nil {
		return nil, err // WithDoneWhen named a column the table lacks
	}
	return g, nil
}

// Table is the guarded table, schema-qualified (as quote_ident writes it).
func (g *Guard) Table() string { return g.t.display }

// Values are the columns an Update sets, by column name. Each name must be a
// column of the table other than the key and the fence column; each value is
// sent as a bound parameter, never as SQL.
type Values map[string]any

type condOp int

const (
	opEq condOp = iota + 1
	opNe
	opIn
	opNull
	opNotNull
)

// Cond is a precondition on the row's current state, such as "status is
// PENDING": the write applies only if it holds. Make one with Eq, Ne, In,
// IsNull or NotNull. Column names are checked against the table; values are
// bound parameters.
type Cond struct {
	column string
	op     condOp
	values []any
}

// Eq holds when column equals value. Eq(column, nil) is IsNull(column).
func Eq(column string, value any) Cond {
	if value == nil {
		return IsNull(column)
	}
	return Cond{column: column, op: opEq, values: []any{value}}
}

// Ne holds when column is distinct from value (NULL counts as distinct from a
// value, and Ne(column, nil) is NotNull(column)).
func Ne(column string, value any) Cond {
	if value == nil {
		return NotNull(column)
	}
	return Cond{column: column, op: opNe, values: []any{value}}
}

// In holds when column equals one of values; it needs at least one.
func In(column string, values ...any) Cond {
	return Cond{column: column, op: opIn, values: values}
}

// IsNull holds when column is NULL.
func IsNull(column string) Cond { return Cond{column: column, op: opNull} }

// NotNull holds when column is not NULL.
func NotNull(column string) Cond { return Cond{column: column, op: opNotNull} }

// text describes the condition, for error messages.
func (c Cond) text() string {
	switch c.op {
	case opEq:
		return fmt.Sprintf("%s = %v", c.column, c.values[0])
	case opNe:
		return fmt.Sprintf("%s IS DISTINCT FROM %v", c.column, c.values[0])
	case opIn:
		return fmt.Sprintf("%s IN %v", c.column, c.values)
	case opNull:
		return c.column + " IS NULL"
	case opNotNull:
		return c.column + " IS NOT NULL"
	}
	return "invalid condition"
}

// builder accumulates SQL and its bound arguments.
type builder struct {
	sb   strings.Builder
	args []any
}

func (b *builder) arg(v any) string {
	b.args = append(b.args, v)
	return "$" + strconv.Itoa(len(b.args))
}

const alias = "pgfence_target"

// conds renders the preconditions, ANDed, after checking their columns.
func (g *Guard) conds(b *builder, where []Cond) (string, error) {
	if len(where) == 0 {
		return "true", nil
	}
	parts := make([]string, 0, len(where))
	for _, c := range where {
		if c.op == 0 {
			return "", invalid("zero Cond: make conditions with Eq, Ne, In, IsNull or NotNull")
		}
		if err := checkIdent("condition column", c.column); err != nil {
			return "", err
		}
		if _, err := g.t.column("condition column", c.column); err != nil {
			return "", err
		}
		col := alias + "." + pgx.Identifier{c.column}.Sanitize()
		switch c.op {
		case opEq:
			parts = append(parts, col+" = "+b.arg(c.values[0]))
		case opNe:
			parts = append(parts, col+" IS DISTINCT FROM "+b.arg(c.values[0]))
		case opIn:
			if len(c.values) == 0 {
				return "", invalid("In(%q) needs at least one value", c.column)
			}
			ps := make([]string, len(c.values))
			for i, v := range c.values {
				if v == nil {
					return "", invalid("In(%q): nil value; use IsNull", c.column)
				}
				ps[i] = b.arg(v)
			}
			parts = append(parts, col+" IN ("+strings.Join(ps, ", ")+")")
		case opNull:
			parts = append(parts, col+" IS NULL")
		case opNotNull:
			parts = append(parts, col+" IS NOT NULL")
		}
	}
	return "(" + strings.Join(parts, " AND ") + ")", nil
}

func (g *Guard) checkArgs(key any, fence int64) error {
	if fence <= 0 {
		return invalid("fence must be positive, got %d (fences from pglease and pgfence_next_fence() always are)", fence)
	}
	if key == nil {
		return invalid("nil key")
	}
	return nil
}

// setFence is the FROM item that sets the transaction's fence, bound to the
// transaction, in the same statement, for a fencing trigger on the table (it
// runs before the row is written). It also checks the fence against the
// ceiling of pgfence's source (see WithOwnFenceSource), which holds whenever
// the statement writes a row: the join cannot produce a row without it.
func (g *Guard) setFence(fenceParam string) string {
	return "(SELECT " + g.opts.setFenceCall(fenceParam) + ") AS pgfence_settings"
}

// Update is the guarded write, one statement:
//
//	UPDATE t SET <values>, <fence column> = fence
//	 WHERE <key column> = key AND <fence column> <= fence AND <where...>
//
// "<=" lets one holder write several times with one fence; a newer fence
// locks older ones out. It also sets the transaction's fence (as SetFence
// does) for a fencing trigger on the table, and so refuses a fence above the
// highest pgfence's source has issued with ErrFenceAboveCeiling, unless the
// Guard was made WithOwnFenceSource.
//
// It returns nil when the row was written. When no row was, it re-reads the
// row with the next statement on db (in the caller's transaction when db is
// one) and returns a *StaleFenceError (ErrStaleFence; counted) if a newer
// holder has written it, an error satisfying ErrPrecondition if a
// condition does not hold, or an error satisfying pgfence.ErrNotFound.
//
// In a REPEATABLE READ or SERIALIZABLE transaction, a row that a newer holder
// changed after the transaction's snapshot makes the UPDATE fail with
// SQLSTATE 40001 (could not serialize) instead: returned as it is; roll back,
// and retry only after checking that you still hold the lease.
//
// Under READ COMMITTED the re-read may see a row newer than the one the
// write saw: a concurrent change that made the write fail can also have made
// the conditions true again. Update then still reports ErrPrecondition (the
// condition did not hold when the write ran) with a detail saying so.
func (g *Guard) Update(ctx context.Context, db pgfence.DBTX, key any, fence int64, set Values, where ...Cond) (err error) {
	defer func() { g.met.wrote(opUpdate, err) }()
	if err := g.checkArgs(key, fence); err != nil {
		return err
	}
	if db == nil {
		return invalid("nil DBTX")
	}
	b := &builder{}
	pKey, pFence := b.arg(key), b.arg(fence)
	names := make([]string, 0, len(set))
	for name := range set {
		names = append(names, name)
	}
	slices.Sort(names) // one SQL text per column set, for the statement cache
	assigns := make([]string, 0, len(names)+1)
	for _, name := range names {
		if err := checkIdent("column", name); err != nil {
			return err
		}
		if _, err := g.t.column("column", name); err != nil {
			return err
		}
		switch name {
		case g.key:
			return invalid("Update may not set the key column %q", name)
		case g.fence:
			return invalid("Update sets the fence column %q itself; leave it out of Values", name)
		}
		assigns = append(assigns, pgx.Identifier{name}.Sanitize()+" = "+b.arg(set[name]))
	}
	assigns = append(assigns, g.qFence+" = "+pFence+"::bigint")
	cond, err := g.conds(b, where)
	if err != nil {
		return err
	}
	fmt.Fprintf(&b.sb, "UPDATE %s AS %s SET %s FROM %s WHERE %s.%s = %s AND %s.%s <= %s::bigint AND %s",
		g.t.quoted(), alias, strings.Join(assigns, ", "), g.setFence(pFence),
		alias, g.qKey, pKey, alias, g.qFence, pFence, cond)
	tag, err := pgdb.Wrap(db, "").Exec(ctx, b.sb.String(), b.args...)
	if err != nil {
		return g.wrap(ctx, "update", key, err)
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	err = g.Check(ctx, db, key, fence, where...)
	if err == nil {
		return &preconditionError{
			table: g.t.display, key: keyText(key), fence: fence,
			detail: "the row did not match when the write ran and matches now: it changed concurrently; re-read it before deciding",
		}
	}
	return err
}

// Check reads the row and says whether a guarded write with fence and where
// would apply now: nil if it would, else ErrFenceAboveCeiling (unless
// WithOwnFenceSource), a *StaleFenceError (counted), an error satisfying ErrPrecondition or
// an error satisfying pgfence.ErrNotFound, decided in that order after the row's
// existence: a stale holder hears it is stale whatever the row's state. Use it after your own guarded SQL changed no row, on the same
// db (your transaction), to learn which it was.
func (g *Guard) Check(ctx context.Context, db pgfence.DBTX, key any, fence int64, where ...Cond) error {
	if err := g.checkArgs(key, fence); err != nil {
		return err
	}
	if db == nil {
		return invalid("nil DBTX")
	}
	b := &builder{}
	pKey := b.arg(key)
	cond, err := g.conds(b, where)
	if err != nil {
		return err
	}
	done := "false"
	if len(g.opts.done) > 0 {
		if done, err = g.conds(b, g.opts.done); err != nil {
			return err
		}
	}
	// The ceiling, unless the fences are the caller's own: a write with a
	// fence above it would be refused (pgfence_set_fence), so Check says so.
	ceiling := "NULL::bigint"
	if !g.opts.ownSource {
		ceiling = g.opts.fn + "pgfence_fence_ceiling()"
	}
	fmt.Fprintf(&b.sb, "SELECT %s.%s, coalesce(%s, false), coalesce(%s, false), %s FROM %s AS %s WHERE %s.%s = %s",
		alias, g.qFence, cond, done, ceiling, g.t.quoted(), alias, alias, g.qKey, pKey)
	var current int64
	var top *int64
	var ok, isDone bool
	err = pgdb.Wrap(db, "").QueryRow(ctx, b.sb.String(), b.args...).Scan(&current, &ok, &isDone, &top)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: %s has no row with %s = %q", pgfence.ErrNotFound, g.t.display, g.key, keyText(key))
	case err != nil:
		return g.wrap(ctx, "re-read", key, err)
	case top != nil && fence > *top:
		return fmt.Errorf("%w: fence %d for %s key %q; the highest issued is %d (pass WithOwnFenceSource if your fences come from a source of your own)",
			ErrFenceAboveCeiling, fence, g.t.display, keyText(key), *top)
	case current > fence:
		return g.opts.caught(ctx, &StaleFenceError{Table: g.t.display, Key: keyText(key), Presented: fence, Current: current})
	case !ok:
		parts := make([]string, len(where))
		for i, c := range where {
			parts[i] = c.text()
		}
		return &preconditionError{
			table: g.t.display, key: keyText(key), fence: fence, done: isDone,
			detail: "the row does not satisfy " + strings.Join(parts, " AND "),
		}
	}
	return nil
}

// ClaimFirst raises the row's fence to fence and returns the state it
// inherits, in one statement:
//
//	UPDATE t SET <fence column> = fence
//	 WHERE <key column> = key AND <fence column> <= fence
//	RETURNING <columns>
//
// Make it the first statement of the new holder's transaction, and decide
// from the state it scanned into dest (one destination per column, as
// pgx.Row.Scan takes them). From then on every older holder's guarded write
// is refused wherever it lands, even before this holder's first real write:
// without the claim, a stale write that arrives first is accepted, because
// the row has nothing newer to compare with. A stale write already in flight
// waits for this transaction's row lock and is refused once it commits.
//
// Zero rows is an answer: a *StaleFenceError (counted) means a newer holder
// exists, so abandon the attempt; pgfence.ErrNotFound means there is no such row.
// ClaimFirst also sets the transaction's fence, as SetFence does, and so
// refuses a fence above the ceiling (ErrFenceAboveCeiling) as Update does.
func (g *Guard) ClaimFirst(ctx context.Context, db pgfence.DBTX, key any, fence int64, columns []string, dest ...any) (err error) {
	defer func() { g.met.wrote(opClaim, err) }()
	if err := g.checkArgs(key, fence); err != nil {
		return err
	}
	if db == nil {
		return invalid("nil DBTX")
	}
	if len(columns) != len(dest) {
		return invalid("ClaimFirst got %d columns and %d destinations", len(columns), len(dest))
	}
	b := &builder{}
	pKey, pFence := b.arg(key), b.arg(fence)
	ret := []string{alias + "." + g.qFence}
	for _, name := range columns {
		if err := checkIdent("column", name); err != nil {
			return err
		}
		if _, err := g.t.column("column", name); err != nil {
			return err
		}
		ret = append(ret, alias+"."+pgx.Identifier{name}.Sanitize())
	}
	fmt.Fprintf(&b.sb, "UPDATE %s AS %s SET %s = %s::bigint FROM %s WHERE %s.%s = %s AND %s.%s <= %s::bigint RETURNING %s",
		g.t.quoted(), alias, g.qFence, pFence, g.setFence(pFence),
		alias, g.qKey, pKey, alias, g.qFence, pFence, strings.Join(ret, ", "))
	var raised int64
	err = pgdb.Wrap(db, "").QueryRow(ctx, b.sb.String(), b.args...).Scan(append([]any{&raised}, dest...)...)
	if err == nil {
		return nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return g.wrap(ctx, "claim-first", key, err)
	}
	err = g.Check(ctx, db, key, fence)
	if err == nil {
		// The row appeared after the claim looked for it.
		return fmt.Errorf("%w: %s had no row with %s = %q when the claim ran", pgfence.ErrNotFound, g.t.display, g.key, keyText(key))
	}
	return err
}

// wrap classifies a database error (a fencing trigger's refusal is counted)
// and names the operation.
func (g *Guard) wrap(ctx context.Context, op string, key any, err error) error {
	err = Classify(err)
	if se, ok := err.(*StaleFenceError); ok {
		se.Key = keyText(key)
		return g.opts.caught(ctx, se)
	}
	if errors.Is(err, ErrNoFence) {
		return err
	}
	return fmt.Errorf("pgguard: %s of %s key %q: %w", op, g.t.display, keyText(key), err)
}

func keyText(key any) string {
	switch k := key.(type) {
	case string:
		return k
	case []byte:
		return string(k)
	case fmt.Stringer:
		return k.String()
	}
	return fmt.Sprint(key)
}
