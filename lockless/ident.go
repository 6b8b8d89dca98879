package lockless

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/catalog"
	"github.com/pgfence/pgfence/internal/validate"
)

var ()

func invalid(format string, args ...any) error { return validate.Invalid("lockless", format, args...) }

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

func (t Table) ident() string { return t.identifier().Sanitize() }

func (t Table) identifier() pgx.Identifier {
	if t.Schema != "" {
		return pgx.Identifier{t.Schema, t.Name}
	}
	return pgx.Identifier{t.Name}
}

func quote(col string) string { return pgx.Identifier{col}.Sanitize() }

func quoteAll(cols []string) string {
	q := make([]string, len(cols))
	for i, c := range cols {
		q[i] = quote(c)
	}
	return strings.Join(q, ", ")
}

// resolve finds the table in the catalog through q.
func (t Table) resolve(ctx context.Context, q pgfence.DBTX) (*catalog.Relation, error) {
	if q == nil {
		return nil, invalid("nil querier")
	}
	if err := t.check(); err != nil {
		return nil, err
	}
	return catalog.Table(ctx, q, "lockless", t.identifier(), "")
}

// keyedColumns returns the columns and their types (format_type) of a
// table whose rows key names one each: it checks that it is a table and
// that key has a unique index of its own (uniqueOn).
func (t Table) keyedColumns(ctx context.Context, q pgfence.DBTX, key string) (map[string]string, error) {
	rel, err := t.resolve(ctx, q)
	if err != nil {
		return nil, err
	}
	cols := columnTypes(rel)
	if err := t.need(cols, "key", key); err != nil {
		return nil, err
	}
	if err := t.uniqueOn(ctx, q, rel, []string{key}, "so a key could name several rows and one update change them all"); err != nil {
		return nil, err
	}
	return cols, nil
}

func columnTypes(rel *catalog.Relation) map[string]string {
	m := make(map[string]string, len(rel.Columns))
	for _, c := range rel.Columns {
		m[c.Name] = c.Type
	}
	return m
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
// columns, in any order. For InsertOnce it is the index that INSERT ... ON
// CONFLICT (cols) infers as its arbiter (without one every insert fails
// with SQLSTATE 42P10); for Versioned and Counter it is what makes their
// key name one row, so that a write meant for one row never changes
// several. A partial, expression or deferrable index does not count.
func (t Table) uniqueOn(ctx context.Context, q pgfence.DBTX, rel *catalog.Relation, cols []string, why string) error {
	indexes, err := catalog.UniqueIndexes(ctx, q, rel)
	if err != nil {
		return fmt.Errorf("lockless: reading the indexes of %s: %w", t.ident(), err)
	}
	ok := slices.ContainsFunc(indexes, func(ix catalog.Index) bool { return ix.Immediate && ix.UniqueOn(cols...) })
	if !ok {
		return invalid("table %s has no unique index or constraint on exactly (%s), %s "+
			"(a partial, expression or deferrable one does not count): add one, e.g. ALTER TABLE %s ADD UNIQUE (%s)",
			t.ident(), quoteAll(cols), why, t.ident(), quoteAll(cols))
	}
	return nil
}
