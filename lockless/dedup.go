package lockless

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/pgdb"
)

// InsertOnceSpec describes a deduplicated insert.
type InsertOnceSpec struct {
	Table Table
	// Columns are the columns Insert fills, in the order of its values.
	Columns []string
	// ConflictOn are the columns of the unique constraint (or unique index)
	// that makes a row unique, e.g. customer_id, billing_period: exactly its
	// key columns, in any order. They must be among Columns.
	ConflictOn []string
	// Returning are the columns Insert scans into its destinations, from the
	// row it created or, for a caller that lost, from the row that exists.
	// Optional.
	Returning []string
}

// InsertOnce creates a row only if no row with the same unique key exists,
// in one statement. Build it once with NewInsertOnce; it is safe for
// concurrent use.
type InsertOnce struct {
	spec         InsertOnceSpec
	keyPos       []int // positions of the conflict columns among the values
	insert, read string
}

// NewInsertOnce checks spec against the catalog through q and prepares the
// statements. It refuses, with pgfence.ErrInvalidInput, unsafe or unknown names and
// conflict columns that no unique index or constraint covers exactly (in any
// order; not a partial, expression or deferrable one): INSERT ... ON
// CONFLICT would fail on every call without one.
func NewInsertOnce(ctx context.Context, q pgfence.DBTX, spec InsertOnceSpec) (*InsertOnce, error) {
	rel, err := spec.Table.resolve(ctx, q)
	if err != nil {
		return nil, err
	}
	cols := columnTypes(rel)
	if err := spec.Table.need(cols, "insert", spec.Columns...); err != nil {
		return nil, err
	}
	if err := spec.Table.need(cols, "conflict", spec.ConflictOn...); err != nil {
		return nil, err
	}
	if err := spec.Table.uniqueOn(ctx, q, rel, spec.ConflictOn, "so INSERT ... ON CONFLICT cannot use it"); err != nil {
		return nil, err
	}
	pos := map[string]int{}
	for i, c := range spec.Columns {
		pos[c] = i + 1
	}
	var match []string
	var keyPos []int
	for k, c := range spec.ConflictOn {
		i, ok := pos[c]
		if !ok {
			return nil, invalid("conflict column %q is not among the inserted columns", c)
		}
		match = append(match, fmt.Sprintf("%s = $%d", quote(c), k+1))
		keyPos = append(keyPos, i-1)
	}
	ret := "1"
	if len(spec.Returning) > 0 {
		if err := spec.Table.need(cols, "returning", spec.Returning...); err != nil {
			return nil, err
		}
		ret = quoteAll(spec.Returning)
	}
	ph := make([]string, len(spec.Columns))
	for i := range ph {
		ph[i] = fmt.Sprintf("$%d", i+1)
	}
	spec.Columns = append([]string(nil), spec.Columns...)
	return &InsertOnce{
		spec: spec, keyPos: keyPos,
		insert: fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s) ON CONFLICT (%s) DO NOTHING RETURNING %s",
			spec.Table.ident(), quoteAll(spec.Columns), strings.Join(ph, ", "), quoteAll(spec.ConflictOn), ret),
		read: fmt.Sprintf("SELECT %s FROM %s WHERE %s", ret, spec.Table.ident(), strings.Join(match, " AND ")),
	}, nil
}

// Insert inserts values (one per column, in order) unless a row with the
// same unique key exists, and reports whether this call created the row.
// Whoever wins, dest (one per Returning column) receives the row's returned
// columns: the created row's for the winner, the existing row's for a loser
// (read right after the insert found the conflict). A concurrent inserter of
// the same key that has not committed yet makes Insert wait for its outcome,
// as the unique index does; if it rolls back, this call wins.
func (i *InsertOnce) Insert(ctx context.Context, q pgfence.DBTX, values []any, dest ...any) (won bool, err error) {
	if q == nil {
		return false, invalid("nil querier")
	}
	if len(values) != len(i.spec.Columns) {
		return false, invalid("%d values for %d columns", len(values), len(i.spec.Columns))
	}
	if n := len(i.spec.Returning); len(dest) != n && !(n == 0 && len(dest) == 0) {
		return false, invalid("%d destinations for %d returning columns", len(dest), n)
	}
	if len(dest) == 0 {
		var one int
		dest = []any{&one}
	}
	err = pgdb.Wrap(q, "").QueryRow(ctx, i.insert, values...).Scan(dest...)
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return false, fmt.Errorf("lockless: insert into %s: %w", i.spec.Table.ident(), err)
	}
	if len(i.spec.Returning) == 0 {
		return false, nil
	}
	key := make([]any, len(i.keyPos))
	for k, p := range i.keyPos {
		key[k] = values[p]
	}
	if err := pgdb.Wrap(q, "").QueryRow(ctx, i.read, key...).Scan(dest...); err != nil {
		return false, fmt.Errorf("lockless: reading the existing row of %s: %w", i.spec.Table.ident(), err)
	}
	return false, nil
}
