package main

import (
	"context"
	"encoding/json"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// passwordRole creates a login role with a password and the privileges the
// CLI needs on the test database, and returns a URL that
// carries the password. The throwaway server trusts its socket, so the
// password is accepted without being checked: what matters here is that the
// CLI never prints it.
func passwordRole(t *testing.T, password string) string {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	role := randomName("pgfence_pw_")
	var dbName string
	if err := pool.QueryRow(ctx, "SELECT current_database()").Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	q := pgx.Identifier{role}.Sanitize()
	for _, stmt := range []string{
		"CREATE ROLE " + q + " LOGIN PASSWORD '" + password + "'",
		"GRANT CREATE ON DATABASE " + pgx.Identifier{dbName}.Sanitize() + " TO " + q,
		"GRANT pgfence_client TO " + q,
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		pool.Exec(ctx, "DROP OWNED BY "+q)
		pool.Exec(ctx, "DROP ROLE "+q)
	})
	return withUser(t, pgtest.URL(), role, password)
}

func TestNoPasswordInOutput(t *testing.T) {
	t.Parallel()
	const password = "pw-S3cr3t-7f1e"
	const special = "sp@c/al:pw?x#S3cr3t" // needs percent-encoding in a URL
	db := passwordRole(t, password)
	enc := url.UserPassword("bob", special).String()
	held := randomName("pw-held:")
	holdKey(t, held)
	cfg := pgtest.Pool(t).Config().ConnConfig

	runs := []struct {
		env  []string
		args []string
		code int
	}{
		{nil, []string{"list", "--database-url", db}, 0},
		{nil, []string{"list", "--json", "--database-url", db}, 0},
		{nil, []string{"show", held, "--database-url", db}, 0},
		{nil, []string{"show", "nope", "--database-url", db}, exitFailed},
		{nil, []string{"--database-url", db, "migrate", "version"}, 0},
		{nil, []string{"exec", "--database-url", db, "--key", randomName("pw:"), "--", "true"}, 0},
		{nil, []string{"exec", "--database-url", db, "--key", held, "--", "true"}, exitHeld},
		{nil, []string{"exec", "--database-url", db, "--key", held, "--wait", "200ms", "--", "true"}, exitWaitExpired},
		{[]string{"DATABASE_URL=" + db}, []string{"exec", "--key", held, "--skip-if-held", "--", "true"}, exitHeld},
		{[]string{"PGHOST=" + cfg.Host, "PGPORT=" + strconv.Itoa(int(cfg.Port)), "PGUSER=" + roleOf(t, db), "PGDATABASE=" + cfg.Database, "PGPASSWORD=" + password}, []string{"list"}, 0},
		// A database that does not exist: the server's error names it.
		{nil, []string{"list", "--database-url", strings.Replace(db, "/pgfence_test_", "/nothere_", 1)}, exitDBError},
		{nil, []string{"exec", "--database-url", "postgres://bob:" + password + "@127.0.0.1:1/x?connect_timeout=2", "--key", "k", "--", "true"}, exitUnreachable},
		{nil, []string{"exec", "--fail-open", "--database-url", "postgres://" + enc + "@127.0.0.1:1/x", "--key", "k", "--", "true"}, 0},
		{nil, []string{"list", "--database-url", "postgres://bob:" + password + "@host:notaport/db"}, exitUsage},
		{nil, []string{"list", "--database-url", "postgres://bob:" + password + "@[::1/db"}, exitUsage},
		{nil, []string{"list", "--database-url", "postgres://" + enc + "@host:notaport/db"}, exitUsage},
		{nil, []string{"list", "--database-url", "postgres://bob:" + special + "@host/db"}, -1},
		{nil, []string{"list", "--database-url", "host=/nonexistent port=notaport password=" + password}, exitUsage},
		{nil, []string{"list", "--database-url", "host=/nonexistent password='" + password + "' user=bob"}, exitUnreachable},
	}
	secret := regexp.MustCompile(`S3cr3t|` + regexp.QuoteMeta(url.QueryEscape(special)) + `|` + regexp.QuoteMeta(enc))
	for _, run := range runs {
		r := pgfence(t, run.env, run.args...)
		if run.code >= 0 && r.code != run.code {
			t.Errorf("pgfence %v: want exit %d, got %s", run.args, run.code, r)
		}
		if loc := secret.FindStringIndex(r.stdout + r.stderr); loc != nil {
			t.Errorf("pgfence %v printed a password: %s", run.args, r)
		}
	}
}

func roleOf(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return p.User.Username()
}

// A short password that occurs inside a number by chance leaves the number
// whole on stdout (every fence starts with 175921860444…, so "1759" once
// made `list --json` print xxxxx2186044417, which is not JSON), while a key
// that holds the password as a token of its own is still masked.
func TestShortPasswordLeavesDataWhole(t *testing.T) {
	t.Parallel()
	const password = "1759"
	db := passwordRole(t, password)
	held := randomName("pw-data:")
	l := holdKey(t, held)
	leak := randomName("pw-key:") + "-" + password
	holdKey(t, leak)

	r := pgfence(t, nil, "list", "--json", "--held", "--database-url", db)
	wantCode(t, r, 0)
	var rows []struct {
		Key   string `json:"key"`
		Fence int64  `json:"fence"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		t.Fatalf("list --json with password %q is not JSON: %v\n%s", password, err, r.stdout)
	}
	var found bool
	for _, x := range rows {
		if x.Key == held {
			found = true
			if x.Fence != l.Fence() {
				t.Fatalf("fence %d printed as %d", l.Fence(), x.Fence)
			}
		}
		if strings.Contains(x.Key, "-"+password) {
			t.Fatalf("a key holding the password as a token was printed unmasked: %q", x.Key)
		}
	}
	if !found {
		t.Fatalf("list --json lacks %s:\n%s", held, r.stdout)
	}
}
