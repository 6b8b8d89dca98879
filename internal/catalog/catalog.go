package catalog

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/fencesql"
	"github.com/pgfence/pgfence/internal/pgdb"
)

// ErrNotFound: no relation of that name exists (in that schema, or in any
// schema on the search_path for an unqualified name).
var ErrNotFound = errors.New("relation not found")

// Relation is a relation found in the catalog.
type Relation struct {
	OID          uint32
	Schema, Name string // as stored
	// Display is schema.name as quote_ident writes it, which is how
	// PostgreSQL and pgfence's fencing trigger name the table.
	Display string
	Kind    string   // pg_class.relkind: "r" table, "p" partitioned table, "v" view, ...
	Columns []Column // in attnum order, dropped ones left out
}

// Column is one of a relation's columns.
type Column struct {
	Name    string
	Num     int16  // attnum
	Type    string // format_type(atttypid, atttypmod): "bigint", "character varying(20)"
	NotNull bool
}

// IsTable reports an ordinary or a partitioned table.
func (r *Relation) IsTable() bool { return r.Kind == "r" || r.Kind == "p" }

// Quoted is schema.name quoted for SQL.
func (r *Relation) Quoted() string { return pgx.Identifier{r.Schema, r.Name}.Sanitize() }

// Column returns the named column (names are case-sensitive, as stored).
func (r *Relation) Column(name string) (Column, bool) {
	i := slices.IndexFunc(r.Columns, func(c Column) bool { return c.Name == name })
	if i < 0 {
		return Column{}, false
	}
	return r.Columns[i], true
}

// Resolve finds the relation name denotes, in one round trip: to_regclass
// reads the name as SQL would (an unqualified name through the
// search_path), and returns ErrNotFound when there is none.
func Resolve(ctx context.Context, db fencedb.DBTX, name pgx.Identifier) (*Relation, error) {
	rows, err := pgdb.Wrap(db, "").Query(ctx, fencesql.CatalogResolve, name.Sanitize())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var r *Relation
	for rows.Next() {
		var rel Relation
		var col struct {
			name, typ *string
			num       *int16
			notNull   *bool
		}
		if err := rows.Scan(&rel.OID, &rel.Schema, &rel.Name, &rel.Display, &rel.Kind,
			&col.name, &col.num, &col.typ, &col.notNull); err != nil {
			return nil, err
		}
		if r == nil {
			r = &rel
		}
		if col.name != nil { // nil: a relation without columns
			r.Columns = append(r.Columns, Column{Name: *col.name, Num: *col.num, Type: *col.typ, NotNull: *col.notNull})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if r == nil {
		return nil, ErrNotFound
	}
	return r, nil
}

// Index is a unique index of a relation.
type Index struct {
	Name string
	// Columns are the key columns in key order (INCLUDE columns left out);
	// "" stands for an expression.
	Columns    []string
	Valid      bool // usable: not left invalid by a failed CREATE INDEX CONCURRENTLY
	Immediate  bool // checked at each statement, not deferred (DEFERRABLE)
	Partial    bool // has a WHERE clause
	Expression bool // has an expression among its key columns
}

// UniqueOn reports whether ix makes cols, in any order, pick at most one
// row: valid, not partial, and with exactly cols as its key columns. Callers
// that need more (ON CONFLICT arbiters must be Immediate) check it too.
func (ix Index) UniqueOn(cols ...string) bool {
	if !ix.Valid || ix.Partial || ix.Expression || len(ix.Columns) != len(cols) {
		return false
	}
	for _, c := range cols {
		if !slices.Contains(ix.Columns, c) {
			return false
		}
	}
	return true
}

// UniqueIndexes lists r's unique indexes (primary keys and unique
// constraints included), by name.
func UniqueIndexes(ctx context.Context, db fencedb.DBTX, r *Relation) ([]Index, error) {
	rows, err := pgdb.Wrap(db, "").Query(ctx, fencesql.CatalogUniqueIndexes, r.OID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Index, error) {
		var ix Index
		err := row.Scan(&ix.Name, &ix.Valid, &ix.Immediate, &ix.Partial, &ix.Expression, &ix.Columns)
		return ix, err
	})
}

// Inheritors returns the tables that inherit from r through INHERITS, at
// any depth, as Display names, in name order. Partitions are left out: they
// are r's own (PostgreSQL clones a partitioned table's row triggers onto
// them), while an INHERITS child shares nothing with its parent but rows
// that UPDATE and DELETE on the parent reach.
func Inheritors(ctx context.Context, db fencedb.DBTX, r *Relation) ([]string, error) {
	rows, err := pgdb.Wrap(db, "").Query(ctx, fencesql.CatalogInheritors, r.OID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// TriggerArgs returns the arguments r's trigger called name was created
// with; ok is false when r has no trigger of that name.
func TriggerArgs(ctx context.Context, db fencedb.DBTX, r *Relation, name string) (args []string, ok bool, err error) {
	var raw []byte
	err = pgdb.Wrap(db, "").QueryRow(ctx, fencesql.CatalogTriggerArgs, r.OID, name).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	// tgargs holds each argument followed by a NUL byte: the last piece of
	// the split is the nothing after the last NUL.
	args = strings.Split(string(raw), "\x00")
	return args[:len(args)-1], true, nil
}

// FunctionExists reports whether signature (such as "pgfence_next_fence()")
// names a function, through the search_path when unqualified.
func FunctionExists(ctx context.Context, db fencedb.DBTX, signature string) (bool, error) {
	var ok bool
	err := pgdb.Wrap(db, "").QueryRow(ctx, fencesql.CatalogFunctionExists, signature).Scan(&ok)
	return ok, err
}
