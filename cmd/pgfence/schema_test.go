package main

import (
	"strings"
	"testing"
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
	r = pgfence(t, nil, "--schema", `bad"name`, "list", "--database-url", db)
	wantCode(t, r, exitUsage)
	if !strings.Contains(r.stderr, "schema") {
		t.Fatalf("bad schema name: %s", r)
	}
}
