package pgtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/migrations"
)

// Roles is a pgfence schema that a role without superuser power migrated
// and owns, a service role that is a member of pgfence_client only (and
// owns a schema of its own for its tables), and a role without the grant:
// each a LOGIN role of the package's database, with its URL.
type Roles struct {
	Schema    string // pgfence's schema, owned by Owner
	AppSchema string // the service's own schema, owned by App
	Owner     string
	App       string
	Nobody    string

	OwnerURL, AppURL, NobodyURL string
}

// ClientRoles creates Roles with unique names and migrates Schema as Owner;
// everything is dropped when the test ends. The package's migration, run as
// a superuser, created pgfence_client, so Owner needs no CREATEROLE.
func ClientRoles(t testing.TB) Roles {
	t.Helper()
	ctx := context.Background()
	n := rand.Uint32()
	r := Roles{
		Schema: fmt.Sprintf("roles_fence_%d", n), AppSchema: fmt.Sprintf("roles_app_%d", n),
		Owner: fmt.Sprintf("roles_owner_%d", n), App: fmt.Sprintf("roles_service_%d", n), Nobody: fmt.Sprintf("roles_nobody_%d", n),
	}
	admin := Pool(t)
	var db string
	if err := admin.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	database := pgx.Identifier{db}.Sanitize()
	for _, q := range []string{
		"CREATE ROLE " + r.Owner + " LOGIN NOSUPERUSER NOCREATEROLE",
		"GRANT CREATE ON DATABASE " + database + " TO " + r.Owner,
		"CREATE ROLE " + r.App + " LOGIN NOSUPERUSER NOCREATEROLE",
		"CREATE ROLE " + r.Nobody + " LOGIN NOSUPERUSER NOCREATEROLE",
		"CREATE SCHEMA " + r.AppSchema + " AUTHORIZATION " + r.App,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("pgtest: %s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		for _, q := range []string{
			"DROP SCHEMA IF EXISTS " + r.AppSchema + " CASCADE",
			"DROP SCHEMA IF EXISTS " + r.Schema + " CASCADE",
			"REVOKE CREATE ON DATABASE " + database + " FROM " + r.Owner,
			"DROP OWNED BY " + r.Owner + ", " + r.App + ", " + r.Nobody + " CASCADE",
			"DROP ROLE IF EXISTS " + r.Owner,
			"DROP ROLE IF EXISTS " + r.App,
			"DROP ROLE IF EXISTS " + r.Nobody,
		} {
			if _, err := admin.Exec(context.Background(), q); err != nil {
				t.Errorf("pgtest: cleanup: %s: %v", q, err)
			}
		}
	})
	r.OwnerURL, r.AppURL, r.NobodyURL = roleURL(t, r.Owner), roleURL(t, r.App), roleURL(t, r.Nobody)
	owner := poolOn(t, r.OwnerURL, nil)
	if err := migrations.Up(ctx, owner, migrations.WithSchema(r.Schema)); err != nil {
		t.Fatalf("pgtest: Up as the owner %s, no superuser: %v", r.Owner, err)
	}
	owner.Close()
	if _, err := admin.Exec(ctx, "GRANT pgfence_client TO "+r.App); err != nil {
		t.Fatal(err)
	}
	return r
}

// roleURL is the package's database as role (trust authentication).
func roleURL(t testing.TB, role string) string {
	t.Helper()
	u, err := url.Parse(URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return u.String()
}
