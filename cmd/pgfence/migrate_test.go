package main

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// An existing lock_leases table: migrate up exits 85 naming it, prints no
// SQL and leaves no dirty version; force sets a version with --yes only.
func TestMigrateConflictAndForce(t *testing.T) {
	t.Parallel()
	db := emptyDatabase(t)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE TABLE lock_leases (id int)"); err != nil {
		t.Fatal(err)
	}
	r := pgfence(t, nil, "migrate", "up", "--database-url", db)
	wantCode(t, r, exitDBError)
	if !strings.Contains(r.stderr, `"lock_leases" already exists`) || strings.Contains(r.stderr, "CREATE") {
		t.Fatalf("conflict: %s", r)
	}
	r = pgfence(t, nil, "migrate", "version", "--database-url", db)
	wantCode(t, r, 0)
	if strings.Contains(r.stdout, "DIRTY") {
		t.Fatalf("dirty after a failed up: %s", r)
	}
	wantCode(t, pgfence(t, nil, "migrate", "force", "1", "--database-url", db), exitUsage)
	wantCode(t, pgfence(t, nil, "migrate", "force", "x", "--yes", "--database-url", db), exitUsage)
	wantCode(t, pgfence(t, nil, "migrate", "force", "1", "--yes", "--database-url", db), 0)
	r = pgfence(t, nil, "migrate", "version", "--database-url", db)
	if !strings.Contains(r.stdout, "version 1 ") {
		t.Fatalf("after force 1: %s", r)
	}
}

// Through PgBouncer in transaction mode: exec works, and migrate up is
// refused with "run migrations on a direct connection" (exit 85), at once.
func TestThroughBouncer(t *testing.T) {
	url := pgtest.BouncerURL(t)
	r := pgfence(t, nil, "exec", "--database-url", url, "--key", randomName("bouncer"), "--", "true")
	wantCode(t, r, 0)
	r = pgfence(t, nil, "list", "--database-url", url)
	wantCode(t, r, 0)
	r = pgfence(t, nil, "migrate", "up", "--database-url", url)
	wantCode(t, r, exitDBError)
	if !strings.Contains(r.stderr, "run migrations on a direct connection") {
		t.Fatalf("migrate through the bouncer: %s", r)
	}
}
