package lockless

import (
	"context"
	"fmt"
	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/pgmode"
	"github.com/pgfence/pgfence/internal/validate"
	"strings"

	"github.com/jackc/pgx/v5"
)

var (
	// ErrInvalidInput: an identifier, value or argument was refused before
	// anything was written. The text says which and why.
	ErrInvalidInput = validate.ErrInvalidInput
)

func invalid(format string, args ...any) error { return validate.Invalid("lockless", format, args...) }

// Querier is fencedb.DBTX, the one interface pgfence's packages run statements on.
//
// Deprecated: use fencedb.DBTX.
type Querier = fencedb.DBTX

// Table names a table, optionally schema-qualified ("" Schema: found through
// search_path).
type Table struct {
	Schema, Name string
}

func checkIdent(what, s string) error {
	if err := validate.Identifier(what, s); err != nil {
		return invalid("%v", err)
	}
	return nil
}

func (t Table) check() error {
	if t.Schema != "" {
		if err := checkIdent("table schema", t.Schema); err != nil {
			return err
		}
	}
	return checkIdent("table name", t.Name)
}

func (t Table) ident() string {
	if t.Schema != "" {
		return pgx.Identifier{t.Schema, t.Name}.Sanitize()
	}
	return pgx.Identifier{t.Name}.Sanitize()
}

func quote(col string) string { return pgx.Identifier{col}.Sanitize() }

func quoteAll(cols []string) string {
	q := make([]string, len(cols))
	for i, c := range cols {
		q[i] = quote(c)
	}
	return strings.Join(q, ", ")
}

// columns returns the table's columns and their types (format_type), after
// checking that it is a table.
func (t Table) columns(ctx context.Context, q fencedb.DBTX) (map[string]string, error) {
	if q == nil {
		return nil, invalid("nil querier")
	}
	if err := t.check(); err != nil {
		return nil, err
	}
	rows, err := pgmode.Wrap(q).Query(ctx, `
SELECT a.attname::text, format_type(a.atttypid, a.atttypmod)
  FROM pg_class c
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
 WHERE c.oid = to_regclass($1) AND c.relkind IN ('r', 'p')`, t.ident())
	if err != nil {
		return nil, fmt.Errorf("lockless: checking table %s: %w", t.ident(), err)
	}
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
		var c [2]string
		err := r.Scan(&c[0], &c[1])
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("lockless: checking table %s: %w", t.ident(), err)
	}
	if len(cols) == 0 {
		return nil, invalid("table %s does not exist (or is not a table visible to this role)", t.ident())
	}
	m := make(map[string]string, len(cols))
	for _, c := range cols {
		m[c[0]] = c[1]
	}
	return m, nil
}

// need checks that each named column is a safe identifier and exists.
func (t Table) need(cols map[string]string, what string, names ...string) error {
	if len(names) == 0 {
		return invalid("%s: no columns named", what)
	}
	seen := map[string]bool{}
	for _, n := range names {
		if err := checkIdent(what+" column", n); err != nil {
			return err
		}
		if _, ok := cols[n]; !ok {
			return invalid("table %s has no column %q (%s)", t.ident(), n, what)
		}
		if seen[n] {
			return invalid("%s: column %q named twice", what, n)
		}
		seen[n] = true
	}
	return nil
}

func isInt(typ string) bool { return typ == "smallint" || typ == "integer" || typ == "bigint" }

// uniqueOn checks that a valid, immediate, non-partial unique index (a
// primary key or unique constraint will do) has exactly cols as its key
// columns, in any order: the index that INSERT ... ON CONFLICT (cols) infers
// as its arbiter. Without one, every insert would fail with SQLSTATE 42P10;
// a partial, expression or deferrable index cannot serve ON CONFLICT (cols)
// either.
func (t Table) uniqueOn(ctx context.Context, q fencedb.DBTX, cols []string) error {
	var ok bool
	err := pgmode.Wrap(q).QueryRow(ctx, `
SELECT EXISTS (
  SELECT 1 FROM pg_catalog.pg_index i
   WHERE i.indrelid = pg_catalog.to_regclass($1)
     AND i.indisunique AND i.indisvalid AND i.indimmediate
     AND i.indpred IS NULL AND i.indexprs IS NULL
     AND i.indnkeyatts = cardinality($2::text[])
     AND (SELECT pg_catalog.array_agg(a.attname::text COLLATE "C" ORDER BY a.attname::text COLLATE "C")
            FROM unnest(i.indkey) WITH ORDINALITY AS k(num, pos)
            JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.num
           WHERE k.pos <= i.indnkeyatts)
       = (SELECT pg_catalog.array_agg(c COLLATE "C" ORDER BY c COLLATE "C") FROM unnest($2::text[]) AS c))`,
		t.ident(), cols).Scan(&ok)
	if err != nil {
		return fmt.Errorf("lockless: reading the indexes of %s: %w", t.ident(), err)
	}
	if !ok {
		return invalid("table %s has no unique index or constraint on exactly (%s), so INSERT ... ON CONFLICT cannot use it "+
			"(a partial, expression or deferrable one does not count): add one, e.g. ALTER TABLE %s ADD UNIQUE (%s)",
			t.ident(), quoteAll(cols), t.ident(), quoteAll(cols))
	}
	return nil
}
