package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// A service role that is a member of pgfence_client only runs exec (also
// waiting for a key another holder releases), list and show on a schema a
// role without superuser power migrated; a role without the grant is told
// the GRANT to run.
func TestClientRoleCommands(t *testing.T) {
	t.Parallel()
	r := pgtest.ClientRoles(t)
	key := randomName("client-role:")
	c, err := pglease.New(pgtest.Pool(t), pglease.WithSchema(r.Schema), pglease.WithOwner("other-holder"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.TryAcquire(context.Background(), key, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(300*time.Millisecond, func() { l.Release(context.Background()) })
	res := pgfence(t, nil, "exec", "--database-url", r.AppURL, "--schema", r.Schema, "--key", key, "--wait", "30s", "--", "true")
	wantCode(t, res, 0)

	res = pgfence(t, nil, "list", "--database-url", r.AppURL, "--schema", r.Schema)
	wantCode(t, res, 0)
	if !strings.Contains(res.stdout, key) {
		t.Fatalf("list as the service role lacks %s:\n%s", key, res)
	}
	res = pgfence(t, nil, "show", key, "--database-url", r.AppURL, "--schema", r.Schema)
	wantCode(t, res, 0)

	res = pgfence(t, nil, "list", "--database-url", r.NobodyURL, "--schema", r.Schema)
	wantCode(t, res, exitDBError)
	if want := "GRANT pgfence_client TO " + r.Nobody; !strings.Contains(res.stderr, want) {
		t.Fatalf("list without the grant does not say %q:\n%s", want, res)
	}
	res = pgfence(t, nil, "exec", "--database-url", r.NobodyURL, "--schema", r.Schema, "--key", key, "--", "true")
	wantCode(t, res, exitDBError)
	if want := "GRANT pgfence_client TO " + r.Nobody; !strings.Contains(res.stderr, want) {
		t.Fatalf("exec without the grant does not say %q:\n%s", want, res)
	}
}
