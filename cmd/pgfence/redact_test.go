package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/internal/pgtest"
)

// passwordRole creates a login role with a password and the privileges the
// CLI and the demo need on the test database, and returns a URL that
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
		"GRANT USAGE ON SCHEMA public TO " + q,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO " + q,
		"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO " + q,
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
		{nil, []string{"demo", "--database-url", "postgres://bob:" + password + "@127.0.0.1:1/x?connect_timeout=2"}, exitUnreachable},
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

// TestDemo runs the demo on a database named by a URL that carries a
// password: it must pass, print no password, and leave nothing behind.
func TestDemo(t *testing.T) {
	t.Parallel()
	db := passwordRole(t, "demo-S3cr3t-pw")
	r := pgfence(t, nil, "demo", "--database-url", db)
	wantCode(t, r, 0)
	for _, want := range []string{"PASS", "REFUSED by the resource", "SENT AGAIN", "FROZEN (SIGSTOP)"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("demo output lacks %q: %s", want, r)
		}
	}
	if strings.Contains(r.stdout, "FAIL") || strings.Contains(r.stdout+r.stderr, "S3cr3t") {
		t.Fatalf("demo: %s", r)
	}
	var left int
	if err := pgtest.Pool(t).QueryRow(context.Background(),
		"SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'pgfence_demo_%'").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("the demo left %d schemas behind", left)
	}
}

// TestDemoEmbedded runs the demo with no database configured: it starts a
// throwaway PostgreSQL, says so, and removes it.
func TestDemoEmbedded(t *testing.T) {
	t.Parallel()
	r := pgfence(t, nil, "demo")
	wantCode(t, r, 0)
	m := regexp.MustCompile(`started a throwaway PostgreSQL (?:in (\S+) )?`).FindStringSubmatch(r.stderr)
	if m == nil || !strings.Contains(r.stderr, "removed") || !strings.Contains(r.stdout, "PASS") {
		t.Fatalf("demo on the embedded default: %s", r)
	}
	if m[1] != "" {
		if _, err := os.Stat(m[1]); !os.IsNotExist(err) {
			t.Fatalf("the throwaway cluster's directory %s is still there (%v)", m[1], err)
		}
	}
}

// TestDemoInterrupted interrupts the demo on the embedded default in the
// middle of a scene: it must exit 130 and remove the throwaway PostgreSQL
// and its worker process.
func TestDemoInterrupted(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(bin, "demo")
	cmd.Env = cleanEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	sc := bufio.NewScanner(stdout)
	var workerPid int
	for sc.Scan() {
		if m := regexp.MustCompile(`pid (\d+): granted`).FindStringSubmatch(sc.Text()); m != nil {
			workerPid, _ = strconv.Atoi(m[1])
		}
		if strings.Contains(sc.Text(), "FROZEN") {
			break
		}
	}
	if workerPid == 0 {
		t.Fatalf("the demo never froze a worker; stderr:\n%s", stderr.String())
	}
	cmd.Process.Signal(syscall.SIGINT)
	go io.Copy(io.Discard, stdout)
	if code := waitExit(t, cmd); code != 130 {
		t.Fatalf("want exit 130, got %d; stderr:\n%s", code, stderr.String())
	}
	m := regexp.MustCompile(`started a throwaway PostgreSQL in (\S+) `).FindStringSubmatch(stderr.String())
	if m != nil {
		if _, err := os.Stat(m[1]); !os.IsNotExist(err) {
			t.Fatalf("the throwaway cluster's directory %s is still there (%v)", m[1], err)
		}
	}
	if err := syscall.Kill(workerPid, 0); err == nil {
		t.Fatalf("the frozen worker (pid %d) survived", workerPid)
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
