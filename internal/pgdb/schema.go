package pgdb

import (
	"fmt"
	"sync"

	"github.com/jackc/pgerrcode"

	"github.com/pgfence/pgfence/internal/pgerr"
	"github.com/pgfence/pgfence/internal/sqltmpl"
)

// Expand is the statement sql for schema (sql itself for ""), from the cache
// Wrap uses: for statements sent some other way (a pgx.Batch).
func Expand(sql, schema string) (string, error) {
	if schema == "" {
		return sql, nil
	}
	return expand(sql, schema)
}

// Hint returns err as a *MissingError when it says that an object of
// pgfence's is missing (undefined table or function, or no such schema: a
// function call names it first) and schema is set; err itself otherwise.
func Hint(err error, schema string) error {
	if err == nil || schema == "" || !(pgerr.IsUndefined(err) || pgerr.Is(err, pgerrcode.InvalidSchemaName)) {
		return err
	}
	return &MissingError{Schema: schema, Err: err}
}

// MissingError: a statement met no pgfence object in Schema, which was never
// migrated, or not to this version. Its message says what to run.
type MissingError struct {
	Schema string
	Err    error // the server's error
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("%v (pgfence's objects are missing from schema %q: run `pgfence migrate up --schema %s` or migrations.Up with migrations.WithSchema)",
		e.Err, e.Schema, e.Schema)
}

func (e *MissingError) Unwrap() error { return e.Err }

// expansions holds the expanded statements: (schema, sql text) → expanded
// text, one lookup per statement. The statements are pgfence's own
// constants, a bounded set, so it never evicts.
var expansions sync.Map

type expansion struct{ schema, sql string }

func expand(sql, schema string) (string, error) {
	k := expansion{schema, sql}
	if s, ok := expansions.Load(k); ok {
		return s.(string), nil
	}
	t, err := sqltmpl.Parse(sql)
	if err != nil {
		return "", err
	}
	s, err := t.Expand(sqltmpl.Names{Schema: schema})
	if err != nil {
		return "", err
	}
	expansions.Store(k, s)
	return s, nil
}
