package main

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// --schema (and PGFENCE_SCHEMA) puts pgfence's objects into a schema of
// their own: migrate up creates it, exec and list use it, and another schema
// or the default layout does not see its leases.
func TestSchemaFlag(t *testing.T) {
	t.Parallel()
	db := emptyDatabase(t)
	wantCode(t, pgfence(t, nil, "--schema", "fences_a", "migrate", "up", "--database-url", db), 0)
	r := pgfence(t, []string{"PGFENCE_SCHEMA=fences_b"}, "migrate", "up", "--database-url", db)
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "pgfence schema version ") || strings.Contains(r.stdout, "no pgfence schema") {
		t.Fatalf("migrate up in fences_b: %s", r)
	}
	key := randomName("schema-flag:")
	wantCode(t, pgfence(t, nil, "exec", "--schema", "fences_a", "--database-url", db, "--key", key, "--", "true"), 0)

	r = pgfence(t, nil, "--schema", "fences_a", "list", "--database-url", db)
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, key) {
		t.Fatalf("list in fences_a lacks %s: %s", key, r)
	}
	r = pgfence(t, []string{"PGFENCE_SCHEMA=fences_b"}, "list", "--database-url", db)
	wantCode(t, r, 0)
	if strings.Contains(r.stdout, key) {
		t.Fatalf("fences_b sees fences_a's lease: %s", r)
	}
	// The default layout was never migrated in this database.
	r = pgfence(t, nil, "list", "--database-url", db)
	wantCode(t, r, exitDBError)
	if !strings.Contains(r.stderr, "migrate up") {
		t.Fatalf("list without a schema: %s", r)
	}
	// A schema that was never migrated: the message says what to run.
	r = pgfence(t, nil, "--schema", "never_made", "list", "--database-url", db)
	wantCode(t, r, exitDBError)
	if !strings.Contains(r.stderr, "pgfence migrate up --schema never_made") {
		t.Fatalf("list in an unmigrated schema: %s", r)
	}
	// The server answered: a missing schema is not an unreachable database.
	for _, args := range [][]string{{"migrate", "version"}, {"migrate", "down", "--yes"}} {
		r = pgfence(t, nil, append(args, "--schema", "never_made", "--database-url", db)...)
		wantCode(t, r, exitDBError)
		if !strings.Contains(r.stderr, "no such schema") {
			t.Fatalf("%v in a missing schema: %s", args, r)
		}
	}
	r = pgfence(t, nil, "--schema", `bad"name`, "list", "--database-url", db)
	wantCode(t, r, exitUsage)
	if !strings.Contains(r.stderr, "schema") {
		t.Fatalf("bad schema name: %s", r)
	}
}

// --schema behind PgBouncer in transaction mode, where a search_path startup
// parameter is refused or dropped: the commands name the schema's objects
// in each statement. The schema is migrated on a direct connection.
func TestSchemaFlagThroughBouncer(t *testing.T) {
	url := pgtest.BouncerURL(t)
	schema := randomName("cli_schema_")
	wantCode(t, pgfence(t, nil, "--schema", schema, "migrate", "up", "--database-url", pgtest.URL()), 0)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), pgtest.URL())
		if err == nil {
			c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
			c.Close(context.Background())
		}
	})
	key := randomName("schema-bouncer:")
	wantCode(t, pgfence(t, nil, "exec", "--schema", schema, "--database-url", url, "--key", key, "--", "true"), 0)
	r := pgfence(t, []string{"PGFENCE_SCHEMA=" + schema}, "list", "--database-url", url)
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, key) {
		t.Fatalf("list in %s through the bouncer lacks %s: %s", schema, key, r)
	}
	r = pgfence(t, nil, "list", "--database-url", url)
	wantCode(t, r, 0)
	if strings.Contains(r.stdout, key) {
		t.Fatalf("the default layout sees %s's lease: %s", schema, r)
	}
}
