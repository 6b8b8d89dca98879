package lockless

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/pgdb"
)

// ConflictError says what an optimistic update found instead of the version
// it expected. It satisfies errors.Is(err, pgfence.ErrConflict).
type ConflictError struct {
	Table string // quoted table name
	Key   any
	// Expected is the version the caller read.
	Expected int64
	// Current is the row's version read right after the refused update, or
	// -1 when the row no longer exists.
	Current int64
}

// Error names the row and the version it was expected at.
func (e *ConflictError) Error() string {
	if e.Current < 0 {
		return fmt.Sprintf("lockless: version conflict on %s key %v: expected version %d, the row no longer exists", e.Table, e.Key, e.Expected)
	}
	return fmt.Sprintf("lockless: version conflict on %s key %v: expected version %d, found %d: read again and retry", e.Table, e.Key, e.Expected, e.Current)
}

// Is reports pgfence.ErrConflict.
func (e *ConflictError) Is(target error) bool { return target == pgfence.ErrConflict }

// versionedSpec names a table with a key column and an integer version
// column, such as accounts (account_id, balance, version).
type versionedSpec struct {
	Table   Table
	Key     string
	Version string
}

// Versioned makes optimistic updates: a write succeeds only if the row is
// still at the version the caller read, and raises the version by one. It is
// safe for concurrent use.
type Versioned struct {
	spec versionedSpec
	cols map[string]string
	get  string
}

// NewVersioned checks table, its key column and its version column (such as
// accounts, account_id, version) against the catalog through q (the key
// column must have a unique index or constraint of its own, so that a key
// names one row; the version column must be smallint, integer or bigint)
// and remembers the table's columns, so that Update can refuse unknown ones
// without a round trip.
func NewVersioned(ctx context.Context, q pgfence.DBTX, table Table, key, version string) (*Versioned, error) {
	spec := versionedSpec{Table: table, Key: key, Version: version}
	cols, err := spec.Table.keyedColumns(ctx, q, spec.Key)
	if err != nil {
		return nil, err
	}
	if err := spec.Table.need(cols, "versioned", spec.Key, spec.Version); err != nil {
		return nil, err
	}
	if !isInt(cols[spec.Version]) {
		return nil, invalid("version column %q of %s is %s; want smallint, integer or bigint", spec.Version, spec.Table.ident(), cols[spec.Version])
	}
	return &Versioned{spec: spec, cols: cols,
		get: fmt.Sprintf("SELECT %s::bigint FROM %s WHERE %s = $1", quote(spec.Version), spec.Table.ident(), quote(spec.Key))}, nil
}

// Update sets the columns in set on the row with key, only if its version is
// still readVersion, and raises the version by one, in one statement. It
// returns the new version. A *ConflictError (errors.Is(err, pgfence.ErrConflict))
// means another writer got there first, or the row is gone: nothing was
// written; read the row again and decide again. set must name at least one
// column of the table other than the key and version columns.
func (v *Versioned) Update(ctx context.Context, q pgfence.DBTX, key any, readVersion int64, set map[string]any) (newVersion int64, err error) {
	if q == nil {
		return 0, invalid("nil querier")
	}
	if len(set) == 0 {
		return 0, invalid("nothing to set")
	}
	names := make([]string, 0, len(set))
	for c := range set {
		if err := checkIdent("set column", c); err != nil {
			return 0, err
		}
		if _, ok := v.cols[c]; !ok {
			return 0, invalid("table %s has no column %q", v.spec.Table.ident(), c)
		}
		if c == v.spec.Key || c == v.spec.Version {
			return 0, invalid("column %q is the key or version column and cannot be set", c)
		}
		names = append(names, c)
	}
	sort.Strings(names) // one statement text per column set
	args := []any{key, readVersion}
	assign := make([]string, 0, len(names)+1)
	for _, c := range names {
		args = append(args, set[c])
		assign = append(assign, fmt.Sprintf("%s = $%d", quote(c), len(args)))
	}
	ver := quote(v.spec.Version)
	assign = append(assign, fmt.Sprintf("%s = %s + 1", ver, ver))
	sql := fmt.Sprintf("UPDATE %s SET %s WHERE %s = $1 AND %s = $2 RETURNING %s::bigint",
		v.spec.Table.ident(), strings.Join(assign, ", "), quote(v.spec.Key), ver, ver)
	err = pgdb.Wrap(q, "").QueryRow(ctx, sql, args...).Scan(&newVersion)
	if err == nil {
		return newVersion, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("lockless: update %s: %w", v.spec.Table.ident(), err)
	}
	ce := &ConflictError{Table: v.spec.Table.ident(), Key: key, Expected: readVersion, Current: -1}
	// Only to explain the refusal; the decision was the UPDATE's.
	if err := pgdb.Wrap(q, "").QueryRow(ctx, v.get, key).Scan(&ce.Current); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("lockless: update %s: version conflict, and reading the current version failed: %w", v.spec.Table.ident(), err)
	}
	return 0, ce
}
