package migrations

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/internal/pgdb"
)

// State is what one schema of a database holds of pgfence's schema.
type State struct {
	// Schema is the schema inspected: WithSchema's, else the current schema
	// of the pool's connections ("" when their search_path names no
	// existing schema).
	Schema string
	// Recorded: the schema has pgfence's version table,
	// pgfence_schema_migrations, as Up (or golang-migrate's CLI with
	// x-migrations-table=pgfence_schema_migrations) creates it.
	Recorded bool
	// Version is the version the table records, 0 when none.
	Version uint
	// Dirty: the recorded migration failed half-way (see Force).
	Dirty bool
	// Present lists the objects the migration files create (tables,
	// sequences, the domain, functions, indexes) that exist in Schema, by
	// name, sorted.
	Present []string
	// Missing lists those that do not.
	Missing []string
}

// AppliedElsewhere reports a schema that holds pgfence's fence sequence
// (a name nothing else uses) without pgfence's record of a version: applied
// by psql, another migration tool or golang-migrate with its default
// version table. A schema with only some other object of one of pgfence's
// names (an application's own lock_leases table) is not.
func (s State) AppliedElsewhere() bool {
	return !s.Recorded && slices.Contains(s.Present, "pgfence_fence_seq")
}

// ErrUnrecorded: Up found pgfence's objects in the schema but no record of
// the version that made them (see State.AppliedElsewhere). Running the
// migrations again would fail on the first object that exists. After
// checking that the schema is complete, record its version with Force.
var ErrUnrecorded = errors.New("pgfence migrations: the schema holds pgfence's objects but no pgfence_schema_migrations")

// unrecordedError is ErrUnrecorded with what Up found (Inspect returns the
// same State).
type unrecordedError struct{ State State }

// Error says what Up found and what to do.
func (e *unrecordedError) Error() string {
	latest, _ := Latest()
	if len(e.State.Missing) > 0 {
		return fmt.Sprintf("%v: schema %s has %d of the %d objects of version %d (another tool applied them) and lacks %s; "+
			"complete it with the files of that version, or drop pgfence's objects and run up again",
			ErrUnrecorded, quote(e.State.Schema), len(e.State.Present), len(e.State.Present)+len(e.State.Missing), latest,
			strings.Join(e.State.Missing, ", "))
	}
	return fmt.Sprintf("%v: schema %s has every object of version %d (another tool applied them); "+
		"record the version with Force(%d) (pgfence migrate force %d --yes) instead of running them again",
		ErrUnrecorded, quote(e.State.Schema), latest, latest, latest)
}

// Unwrap makes errors.Is(err, ErrUnrecorded) hold.
func (e *unrecordedError) Unwrap() error { return ErrUnrecorded }

// Inspect reads, without changing anything, which version pgfence's version
// table records in the schema and which of pgfence's objects exist there.
// It runs plain reads, so it also works through a transaction pooler.
func Inspect(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (State, error) {
	if pool == nil {
		return State{}, errors.New("pgfence migrations: nil pool")
	}
	o, err := collect(opts)
	if err != nil {
		return State{}, err
	}
	st := State{Schema: o.schema}
	if st.Schema == "" {
		var s *string
		if err := pool.QueryRow(ctx, "SELECT current_schema()", pgdb.Mode).Scan(&s); err != nil {
			return st, fmt.Errorf("pgfence migrations: inspect: %w", err)
		}
		if s == nil {
			return st, nil
		}
		st.Schema = *s
	}
	names, err := objectNames()
	if err != nil {
		return st, err
	}
	var exists bool
	err = pool.QueryRow(ctx, inspectSQL, pgdb.Mode, st.Schema, names, Table).Scan(&exists, &st.Present, &st.Recorded)
	if err != nil {
		return st, fmt.Errorf("pgfence migrations: inspect: %w", err)
	}
	if !exists {
		return st, fmt.Errorf("%w: %q (migrate up with this schema first)", ErrNoSuchSchema, st.Schema)
	}
	for _, n := range names {
		if !slices.Contains(st.Present, n) {
			st.Missing = append(st.Missing, n)
		}
	}
	if st.Recorded {
		// golang-migrate keeps one row; none after Force(-1).
		err := pool.QueryRow(ctx, "SELECT version, dirty FROM "+pgx.Identifier{st.Schema, Table}.Sanitize()+" LIMIT 1",
			pgdb.Mode).Scan(&st.Version, &st.Dirty)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return st, fmt.Errorf("pgfence migrations: read the version: %w", err)
		}
	}
	return st, nil
}

// inspectSQL: whether schema $1 exists, which of the names $2 it holds (as
// a relation, a function or a domain), and whether it holds the version
// table $3.
const inspectSQL = `
SELECT n.oid IS NOT NULL,
       coalesce((SELECT array_agg(name ORDER BY name) FROM unnest($2::text[]) AS name
                  WHERE EXISTS (SELECT FROM pg_class c WHERE c.relnamespace = n.oid AND c.relname = name)
                     OR EXISTS (SELECT FROM pg_proc p WHERE p.pronamespace = n.oid AND p.proname = name)
                     OR EXISTS (SELECT FROM pg_type t WHERE t.typnamespace = n.oid AND t.typname = name AND t.typtype = 'd')),
                '{}'),
       EXISTS (SELECT FROM pg_class c WHERE c.relnamespace = n.oid AND c.relname = $3 AND c.relkind = 'r')
  FROM (SELECT (SELECT oid FROM pg_namespace WHERE nspname = $1) AS oid) AS n`

// objectRe matches a statement that creates (group 1) or drops (group 2)
// one object.
var objectRe = regexp.MustCompile(`(?m)^(?:(CREATE) (?:OR REPLACE )?(?:TABLE|SEQUENCE|DOMAIN|FUNCTION|INDEX) (?:IF NOT EXISTS )?|(DROP) (?:TABLE|SEQUENCE|DOMAIN|FUNCTION|INDEX) (?:IF EXISTS )?)([a-z_][a-z0-9_]*)`)

// objectNames lists the objects the up migrations leave behind, in name
// order: each file's CREATE and DROP statements (those inside DO blocks
// too, which start a line as well) in the order they run.
func objectNames() ([]string, error) {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	for _, e := range entries { // ReadDir sorts by name: in version order
		if !strings.HasSuffix(e.Name(), ".up.sql") {
			continue
		}
		b, err := fs.ReadFile(files, e.Name())
		if err != nil {
			return nil, err
		}
		for _, m := range objectRe.FindAllSubmatch(b, -1) {
			set[string(m[3])] = len(m[1]) > 0
		}
	}
	names := make([]string, 0, len(set))
	for n, exists := range set {
		if exists {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names, nil
}
