package pgguard

import (
	"context"
	"errors"
	"fmt"
	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/pgmode"
	"github.com/pgfence/pgfence/internal/validate"

	"github.com/jackc/pgx/v5"
)

// DBTX is fencedb.DBTX, the one interface pgfence's packages run statements on.
//
// Deprecated: use fencedb.DBTX.
type DBTX = fencedb.DBTX

// DefaultFenceColumn is the fence column's name when Table.FenceColumn is
// empty.
const DefaultFenceColumn = "last_fence"

// Table names a table of the caller's to guard. Every name is checked (see
// Guard) and always quoted, never spliced into SQL as it was given.
type Table struct {
	// Schema is the table's schema. Default: the first schema on the
	// search_path that has the table, resolved once, when the Guard is made.
	Schema string
	// Name is the table's name, as created (names are case-sensitive:
	// `CREATE TABLE Jobs` made a table named jobs).
	Name string
	// KeyColumn is the column that picks one row: it must carry a unique
	// index or constraint of its own (a primary key will do). Needed by
	// NewGuard; ignored by AddFenceColumn and the trigger helpers.
	KeyColumn string
	// FenceColumn is the bigint NOT NULL column holding the fence of the
	// newest holder that wrote the row. Default: last_fence.
	FenceColumn string
}

func (t Table) fenceColumn() string {
	if t.FenceColumn == "" {
		return DefaultFenceColumn
	}
	return t.FenceColumn
}

func checkIdent(what, s string) error {
	if err := validate.Identifier(what, s); err != nil {
		return invalid("%v", err)
	}
	return nil
}

// check validates t's names without the database. needKey says whether the
// key column is required.
func (t Table) check(needKey bool) error {
	if t.Schema != "" {
		if err := checkIdent("schema name", t.Schema); err != nil {
			return err
		}
	}
	if err := checkIdent("table name", t.Name); err != nil {
		return err
	}
	if needKey || t.KeyColumn != "" {
		if err := checkIdent("key column", t.KeyColumn); err != nil {
			return err
		}
	}
	if err := checkIdent("fence column", t.fenceColumn()); err != nil {
		return err
	}
	if t.KeyColumn != "" && t.KeyColumn == t.fenceColumn() {
		return invalid("the key column and the fence column are both %q", t.KeyColumn)
	}
	return nil
}

func (t Table) ident() pgx.Identifier {
	if t.Schema != "" {
		return pgx.Identifier{t.Schema, t.Name}
	}
	return pgx.Identifier{t.Name}
}

type column struct {
	num     int16
	typ     string // format_type
	notNull bool
}

// resolved is a table found in the catalog.
type resolved struct {
	schema, name string
	// display is schema.table as quote_ident writes it, which is how the
	// fencing trigger names it: for errors and counters, never for SQL.
	display string
	columns map[string]column
}

func (r *resolved) quoted() string { return pgx.Identifier{r.schema, r.name}.Sanitize() }

// resolve finds t in the catalog: the table (an ordinary or partitioned
// one) and its columns. The name is passed to to_regclass as a bound value.
func resolve(ctx context.Context, db fencedb.DBTX, t Table) (*resolved, error) {
	r := &resolved{columns: map[string]column{}}
	var kind string
	err := pgmode.Wrap(db).QueryRow(ctx, `
SELECT n.nspname::text, c.relname::text,
       pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(c.relname), c.relkind::text
  FROM pg_catalog.pg_class c
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE c.oid = pg_catalog.to_regclass($1)`, t.ident().Sanitize()).Scan(&r.schema, &r.name, &r.display, &kind)
	if errors.Is(err, pgx.ErrNoRows) {
		if t.Schema != "" {
			return nil, invalid("table %s does not exist", t.ident().Sanitize())
		}
		return nil, invalid("table %s does not exist in any schema on the search_path", t.ident().Sanitize())
	}
	if err != nil {
		return nil, fmt.Errorf("pgguard: looking up table %s: %w", t.ident().Sanitize(), err)
	}
	if kind != "r" && kind != "p" {
		return nil, invalid("%s is not a table (relkind %q)", t.ident().Sanitize(), kind)
	}
	rows, err := pgmode.Wrap(db).Query(ctx, `
SELECT a.attname::text, a.attnum, pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull
  FROM pg_catalog.pg_attribute a
 WHERE a.attrelid = pg_catalog.to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped`, r.quoted())
	if err != nil {
		return nil, fmt.Errorf("pgguard: reading the columns of %s: %w", r.quoted(), err)
	}
	for rows.Next() {
		var name string
		var c column
		if err := rows.Scan(&name, &c.num, &c.typ, &c.notNull); err != nil {
			rows.Close()
			return nil, fmt.Errorf("pgguard: reading the columns of %s: %w", r.quoted(), err)
		}
		r.columns[name] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgguard: reading the columns of %s: %w", r.quoted(), err)
	}
	return r, nil
}

// column returns the named column, or an error that names the table.
func (r *resolved) column(what, name string) (column, error) {
	c, ok := r.columns[name]
	if !ok {
		return c, invalid("%s %q does not exist in table %s", what, name, r.quoted())
	}
	return c, nil
}

// fenceColumn checks that the fence column is bigint NOT NULL.
func (r *resolved) fenceColumn(name string) error {
	c, err := r.column("fence column", name)
	if err != nil {
		return err
	}
	if c.typ != "bigint" || !c.notNull {
		return invalid("fence column %q of %s is %s%s; it must be bigint NOT NULL (see AddFenceColumn)",
			name, r.quoted(), c.typ, map[bool]string{true: " NOT NULL", false: ""}[c.notNull])
	}
	return nil
}

// uniqueKey checks that the key column alone carries a valid, non-partial
// unique index, so that a key picks at most one row.
func (r *resolved) uniqueKey(ctx context.Context, db fencedb.DBTX, name string) error {
	c, err := r.column("key column", name)
	if err != nil {
		return err
	}
	var ok bool
	err = pgmode.Wrap(db).QueryRow(ctx, `
SELECT EXISTS (
  SELECT 1 FROM pg_catalog.pg_index i
   WHERE i.indrelid = pg_catalog.to_regclass($1)
     AND i.indisunique AND i.indisvalid
     AND i.indpred IS NULL AND i.indexprs IS NULL
     AND i.indnkeyatts = 1 AND i.indkey[0] = $2)`, r.quoted(), c.num).Scan(&ok)
	if err != nil {
		return fmt.Errorf("pgguard: reading the indexes of %s: %w", r.quoted(), err)
	}
	if !ok {
		return invalid("key column %q of %s has no unique index or constraint of its own, so a key could match several rows", name, r.quoted())
	}
	return nil
}
