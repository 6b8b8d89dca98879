package pgtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/migrations"
)

// SchemaPool returns a pool whose connections use a pgfence of their own:
// a fresh schema in the package's database, migrated and dropped with the
// test. Its tables start empty, for tests that count or walk every row
// (other tests' rows stay in the default schema). opts adjust the
// configuration, as for Pool.
func SchemaPool(t testing.TB, opts ...func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	schema := Schema(t)
	return Pool(t, append([]func(*pgxpool.Config){InSchema(schema)}, opts...)...)
}

// InSchema sets the search_path of the connections a pool opens to schema
// alone, as a startup parameter (on direct connections only: PgBouncer
// refuses or drops it).
func InSchema(schema string) func(*pgxpool.Config) {
	return func(cfg *pgxpool.Config) {
		cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	}
}

// Schema creates a fresh schema in the package's database, migrates
// pgfence's objects into it (migrations.WithSchema), drops it when the test
// ends and returns its name: for clients given the schema with their own
// WithSchema options.
func Schema(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	schema := fmt.Sprintf("pgtest_%d", rand.Uint32())
	base := Pool(t)
	if err := migrations.Up(ctx, base, migrations.WithSchema(schema)); err != nil {
		t.Fatalf("pgtest: migrate schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := base.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("pgtest: drop schema %s: %v", schema, err)
		}
	})
	return schema
}
