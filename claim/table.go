package claim

import (
	"context"
	"fmt"
	"github.com/pgfence/pgfence/internal/catalog"
	"github.com/pgfence/pgfence/internal/validate"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Table names a jobs table and its columns. The state column holds the
// texts 'available', 'running', 'completed' and 'dead'. Required columns and
// the types New accepts:
//
//	ID          bigint or integer (unique)
//	State       text or varchar
//	Priority    smallint, integer or bigint (smaller runs first)
//	RunAt       timestamptz (not claimed before it)
//	Attempt     smallint, integer or bigint (attempts started so far)
//	MaxAttempts smallint, integer or bigint
//	Fence       bigint (the current claim's fencing token)
//	Owner       text or varchar
//	ExpiresAt   timestamptz
//
// Optional columns ("" for none): Queue (text or varchar; claims and rescues
// then touch only the claimer's queue), LastError (text or varchar; Fail and
// Rescue record why), FinishedAt (timestamptz; set on completed and dead),
// Payload (any type; returned as JSON with each claimed job; Claimer.Enqueue
// writes it as jsonb), Kind (text or varchar; written by Claimer.Enqueue).
//
// Give the table a partial index that serves the claim order, for example
//
//	CREATE INDEX ON my_jobs (priority, run_at, id) WHERE state = 'available';
//
// (with the queue column first if there is one), and one on
// (expires_at) WHERE state = 'running' for Rescue.
type Table struct {
	Schema string // "" = found through search_path
	Name   string

	ID, State, Priority, RunAt, Attempt, MaxAttempts, Fence, Owner, ExpiresAt string

	Queue, LastError, FinishedAt, Payload, Kind string
}

// defaultTable is the ready-made pgfence_jobs table that pgfence's
// migrations create.
func defaultTable() Table {
	return Table{
		Name: "pgfence_jobs",
		ID:   "id", State: "state", Priority: "priority", RunAt: "run_at",
		Attempt: "attempt", MaxAttempts: "max_attempts", Fence: "fence",
		Owner: "owner", ExpiresAt: "expires_at",
		Queue: "queue", LastError: "last_error", FinishedAt: "finished_at", Payload: "payload", Kind: "kind",
	}
}

func checkIdent(what, s string) error {
	if err := validate.Identifier(what, s); err != nil {
		return invalid("%v", err)
	}
	return nil
}

type colSpec struct {
	what, name string
	required   bool
	types      []string // accepted format_type() outputs; prefix match; nil = any
}

var (
	intTypes  = []string{"smallint", "integer", "bigint"}
	textTypes = []string{"text", "character varying"}
	tsTypes   = []string{"timestamp with time zone"}
)

func (t Table) columns() []colSpec {
	return []colSpec{
		{"ID", t.ID, true, []string{"integer", "bigint"}},
		{"State", t.State, true, textTypes},
		{"Priority", t.Priority, true, intTypes},
		{"RunAt", t.RunAt, true, tsTypes},
		{"Attempt", t.Attempt, true, intTypes},
		{"MaxAttempts", t.MaxAttempts, true, intTypes},
		{"Fence", t.Fence, true, []string{"bigint"}},
		{"Owner", t.Owner, true, textTypes},
		{"ExpiresAt", t.ExpiresAt, true, tsTypes},
		{"Queue", t.Queue, false, textTypes},
		{"LastError", t.LastError, false, textTypes},
		{"FinishedAt", t.FinishedAt, false, tsTypes},
		{"Payload", t.Payload, false, nil},
		{"Kind", t.Kind, false, textTypes},
	}
}

// check validates the identifiers without the database.
func (t Table) check() error {
	if t.Schema != "" {
		if err := checkIdent("table schema", t.Schema); err != nil {
			return err
		}
	}
	if err := checkIdent("table name", t.Name); err != nil {
		return err
	}
	seen := map[string]string{}
	for _, c := range t.columns() {
		if c.name == "" && !c.required {
			continue
		}
		if err := checkIdent(c.what+" column", c.name); err != nil {
			return err
		}
		if other, dup := seen[c.name]; dup {
			return invalid("column %q is named for both %s and %s", c.name, other, c.what)
		}
		seen[c.name] = c.what
	}
	return nil
}

func (t Table) ident() string { return t.identifier().Sanitize() }

func (t Table) identifier() pgx.Identifier {
	if t.Schema != "" {
		return pgx.Identifier{t.Schema, t.Name}
	}
	return pgx.Identifier{t.Name}
}

// verify checks the table and its columns against the catalog, and that
// pgfence's fence source exists (in schema, when not "").
func (t Table) verify(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	migrate := "`pgfence migrate up` or migrations.Up"
	fn := "pgfence_next_fence()"
	if schema != "" {
		migrate = fmt.Sprintf("`pgfence migrate up --schema %s` or migrations.Up with migrations.WithSchema", schema)
		fn = pgx.Identifier{schema}.Sanitize() + "." + fn
	}
	rel, err := catalog.Table(ctx, pool, "claim", t.identifier(), "for the ready-made table run pgfence's migrations ("+migrate+")")
	if err != nil {
		return err
	}
	haveFence, err := catalog.FunctionExists(ctx, pool, fn)
	if err != nil {
		return fmt.Errorf("claim: looking for %s: %w", fn, err)
	}
	if !haveFence {
		return fmt.Errorf("claim: function %s is missing: run pgfence's migrations (%s)", fn, migrate)
	}
	for _, c := range t.columns() {
		if c.name == "" {
			continue
		}
		col, ok := rel.Column(c.name)
		if !ok {
			return invalid("table %s has no column %q (the %s column)", t.ident(), c.name, c.what)
		}
		if c.types == nil {
			continue
		}
		match := false
		for _, want := range c.types {
			if col.Type == want || strings.HasPrefix(col.Type, want+"(") {
				match = true
			}
		}
		if !match {
			return invalid("column %q of %s (the %s column) is %s; want one of %s", c.name, t.ident(), c.what, col.Type, strings.Join(c.types, ", "))
		}
	}
	return nil
}
