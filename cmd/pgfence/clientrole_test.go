package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// A service role that is a member of pgfence_client only runs exec (also
// waiting for a key another holder releases), list, show and serve on a schema a
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

	held, err := c.TryAcquire(context.Background(), key+"/served", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	s := startServe(t, r.AppURL, "--schema", r.Schema)
	eventually(t, "serve's state as the service role", func() string {
		if code, body := s.get(t, "/api/state"); code != 200 || !strings.Contains(body, key+"/served") {
			return fmt.Sprintf("/api/state: %d %.300s", code, body)
		}
		return ""
	})

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
