package migrations

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/internal/pgerr"
	"github.com/pgfence/pgfence/internal/validate"
)

// ErrNoSuchSchema: Down, Version or Force named a schema (WithSchema) that
// does not exist. Only Up creates it.
var ErrNoSuchSchema = errors.New("pgfence migrations: no such schema")

// Option changes where or how the migrations run.
type Option func(*options)

type options struct {
	schema string
}

// WithSchema puts every pgfence object (tables, sequences, functions, the
// domain, and golang-migrate's version table) into schema instead of the
// first schema of the connection's search_path. Up creates the schema when it
// is missing. Each schema is a pgfence of its own: its own leases, jobs and
// fence sequence, its own version, migrated and reverted independently.
//
// The clients of that schema take it as an option of their own
// (pglease.WithSchema, claim.WithSchema, pgguard.WithSchema, which
// payouts.New takes too), which needs no search_path; pgfence's functions name
// their schema's objects qualified.
func WithSchema(schema string) Option {
	return func(o *options) { o.schema = schema }
}

func collect(opts []Option) (options, error) {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.schema != "" {
		if err := validate.Identifier("schema", o.schema); err != nil {
			return o, validate.Invalid("pgfence migrations", "%v", err)
		}
	}
	return o, nil
}

func quote(schema string) string { return pgx.Identifier{schema}.Sanitize() }

// ensureSchema runs on each connection golang-migrate opens: with a schema,
// Up creates it (IF NOT EXISTS: concurrent instances may race here, and the
// loser's duplicate error is harmless), the others require it, since a
// search_path naming a missing schema would leave golang-migrate with no
// schema to put its version table into.
func (t *tracked) ensureSchema(ctx context.Context, c *pgx.Conn) error {
	if t.schema == "" {
		return nil
	}
	if t.create {
		_, err := c.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+quote(t.schema))
		if err == nil || isDuplicate(err) {
			return nil
		}
		return fmt.Errorf("pgfence migrations: create schema %s: %w", quote(t.schema), err)
	}
	var exists bool
	if err := c.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", t.schema).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		return ErrNoSuchSchema
	}
	return nil
}

// isDuplicate: a concurrent CREATE SCHEMA IF NOT EXISTS won the race
// (PostgreSQL checks IF NOT EXISTS before the insert, not atomically).
func isDuplicate(err error) bool {
	return pgerr.IsDuplicate(err)
}
