package lockless

import (
	"context"
	"errors"
	"fmt"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/pgdb"
)

var (
	// ErrInsufficient: Counter.Take found fewer than the requested units
	// (sold out). Nothing was taken.
	ErrInsufficient = errors.New("lockless: not enough left")
)

// counterSpec names a table with a key column and an integer quantity
// column, such as inventory (sku, quantity).
type counterSpec struct {
	Table    Table
	Key      string
	Quantity string
}

// Counter takes units from a quantity column with the check and the
// decrement in one statement, so the quantity can never go below zero and no
// unit is sold twice, however many callers race. It is safe for concurrent
// use.
type Counter struct {
	spec counterSpec
	take string
}

// NewCounter checks table, its key column and its quantity column (such as
// inventory, sku, quantity) against the catalog through q (the key column
// must have a unique index or constraint of its own, so that a key names one
// row; the quantity column must be smallint, integer or bigint) and prepares
// the statement.
func NewCounter(ctx context.Context, q pgfence.DBTX, table Table, key, quantity string) (*Counter, error) {
	spec := counterSpec{Table: table, Key: key, Quantity: quantity}
	cols, err := spec.Table.keyedColumns(ctx, q, spec.Key)
	if err != nil {
		return nil, err
	}
	if err := spec.Table.need(cols, "counter", spec.Key, spec.Quantity); err != nil {
		return nil, err
	}
	if !isInt(cols[spec.Quantity]) {
		return nil, invalid("quantity column %q of %s is %s; want smallint, integer or bigint", spec.Quantity, spec.Table.ident(), cols[spec.Quantity])
	}
	t, k, qty := spec.Table.ident(), quote(spec.Key), quote(spec.Quantity)
	return &Counter{spec: spec, take: fmt.Sprintf(`WITH took AS (
  UPDATE %[1]s SET %[3]s = %[3]s - $2 WHERE %[2]s = $1 AND %[3]s >= $2 RETURNING %[3]s
)
SELECT (SELECT %[3]s::bigint FROM took), EXISTS (SELECT 1 FROM %[1]s WHERE %[2]s = $1)`, t, k, qty)}, nil
}

// Take removes n units from the row with key, only if at least n are left,
// in one statement, and returns how many remain. ErrInsufficient means fewer
// than n were left and nothing was taken; pgfence.ErrNotFound that no row has key.
// n must be at least 1.
func (c *Counter) Take(ctx context.Context, q pgfence.DBTX, key any, n int64) (remaining int64, err error) {
	if q == nil {
		return 0, invalid("nil querier")
	}
	if n < 1 {
		return 0, invalid("take %d: the amount must be at least 1", n)
	}
	var left *int64
	var exists bool
	if err := pgdb.Wrap(q, "").QueryRow(ctx, c.take, key, n).Scan(&left, &exists); err != nil {
		return 0, fmt.Errorf("lockless: take from %s: %w", c.spec.Table.ident(), err)
	}
	switch {
	case left != nil:
		return *left, nil
	case !exists:
		return 0, fmt.Errorf("%w: %s has no row with %s = %v", pgfence.ErrNotFound, c.spec.Table.ident(), c.spec.Key, key)
	}
	return 0, fmt.Errorf("%w: %s = %v has fewer than %d", ErrInsufficient, c.spec.Key, key, n)
}
