package pgguard

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/catalog"
	"github.com/pgfence/pgfence/internal/validate"
)

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
	// NewGuard; ignored by FenceColumnMigration and the trigger helpers.
	KeyColumn string
	// FenceColumn is the bigint NOT NULL column holding the fence of the
	// newest holder that wrote the row. Default: last_fence.
	FenceColumn string
}

func (t Table) fenceColumn() string {
	if t.FenceColumn == "" {
		return "last_fence"
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

// resolved is a table found in the catalog.
type resolved struct {
	rel *catalog.Relation
	// display is schema.table as quote_ident writes it, which is how the
	// fencing trigger names it: for errors and counters, never for SQL.
	display string
}

func (r *resolved) quoted() string { return r.rel.Quoted() }

// resolve finds t in the catalog: the table (an ordinary or partitioned
// one) and its columns. The name is passed to to_regclass as a bound value.
func resolve(ctx context.Context, db pgfence.DBTX, t Table) (*resolved, error) {
	rel, err := catalog.Table(ctx, db, "pgguard", t.ident(), "")
	if err != nil {
		return nil, err
	}
	return &resolved{rel: rel, display: rel.Display}, nil
}

// column returns the named column, or an error that names the table.
func (r *resolved) column(what, name string) (catalog.Column, error) {
	c, ok := r.rel.Column(name)
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
	if c.Type != "bigint" || !c.NotNull {
		return invalid("fence column %q of %s is %s%s; it must be bigint NOT NULL (see FenceColumnMigration)",
			name, r.quoted(), c.Type, map[bool]string{true: " NOT NULL", false: ""}[c.NotNull])
	}
	return nil
}

// uniqueKey checks that the key column alone carries a valid, non-partial
// unique index, so that a key picks at most one row.
func (r *resolved) uniqueKey(ctx context.Context, db pgfence.DBTX, name string) error {
	if _, err := r.column("key column", name); err != nil {
		return err
	}
	indexes, err := catalog.UniqueIndexes(ctx, db, r.rel)
	if err != nil {
		return fmt.Errorf("pgguard: reading the indexes of %s: %w", r.quoted(), err)
	}
	if !slices.ContainsFunc(indexes, func(ix catalog.Index) bool { return ix.UniqueOn(name) }) {
		return invalid("key column %q of %s has no unique index or constraint of its own, so a key could match several rows", name, r.quoted())
	}
	return nil
}
