package examples_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/internal/testsupport/dbenv"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// TestMain starts one server for the whole run (dbenv: an explicit URL or a
// throwaway PostgreSQL); each example then makes and drops a database of its
// own on it.
func TestMain(m *testing.M) { pgtest.Main(removeBinaries{m}) }

// removeBinaries runs the tests, then removes the examples built for them.
type removeBinaries struct{ m *testing.M }

func (r removeBinaries) Run() int {
	defer func() {
		if binDir != "" {
			os.RemoveAll(binDir)
		}
	}()
	return r.m.Run()
}

// perExample bounds one example's run; the examples take a few seconds.
const perExample = 90 * time.Second

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// examples lists the directories under examples/ that hold a main package.
func examples(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() || e.Name() == "internal" {
			continue
		}
		if _, err := os.Stat(filepath.Join(e.Name(), "main.go")); err == nil {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		t.Fatal("no examples found")
	}
	return names
}

// build compiles every example once, with the race detector when this test
// binary has it, into a directory shared by the tests.
func build(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "pgfence-examples-")
		if buildErr != nil {
			return
		}
		args := []string{"build", "-o", binDir + string(filepath.Separator)}
		if raceEnabled {
			args = append(args, "-race")
		}
		args = append(args, "./...")
		cmd := exec.Command("go", args...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

// runExample runs one built example with env replacing the server settings
// of this process's environment.
func runExample(t *testing.T, name string, env []string) result {
	t.Helper()
	bin := filepath.Join(build(t), name) // before the clock starts: the first build is slow
	ctx, cancel := context.WithTimeout(context.Background(), perExample)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(withoutServerSettings(os.Environ()), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	r := result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	if ctx.Err() != nil {
		t.Fatalf("%s did not finish within %v\nstdout:\n%s\nstderr:\n%s", name, perExample, r.stdout, r.stderr)
	}
	if err != nil && r.code == -1 {
		t.Fatalf("%s: %v", name, err)
	}
	return r
}

// withoutServerSettings removes from env what chooses a server: the
// database URLs and libpq's PG* variables.
func withoutServerSettings(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		return strings.HasPrefix(kv, "PGFENCE_DATABASE_URL=") || strings.HasPrefix(kv, "DATABASE_URL=") ||
			strings.HasPrefix(kv, "PG") && !strings.HasPrefix(kv, "PGFENCE_")
	})
}

// noServer is an environment in which no server is reachable: no URL, and
// libpq's PGHOST naming an empty socket directory. TMPDIR is a directory of
// its own, tmp, to see whether a throwaway server is left in it. As root,
// the throwaway server runs as the user postgres, which must be able to
// reach its directory there: t.TempDir's parent is private, so not that.
func noServer(t *testing.T) (env []string, tmp string) {
	t.Helper()
	tmp, err := os.MkdirTemp("", "pgfence-examples-tmpdir-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{"PGHOST=" + t.TempDir(), "TMPDIR=" + tmp}, tmp
}

// throwawayLeft fails t if a throwaway server's directory is left in tmp.
func throwawayLeft(t *testing.T, tmp string) {
	t.Helper()
	left, err := filepath.Glob(filepath.Join(tmp, "pgfence-pg-*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("a throwaway server's directory was left behind: %v", left)
	}
}

var verdictRE = regexp.MustCompile(`(?m)^VERDICT: (PASS|FAIL) — .+$`)

// checkVerdict requires exit code 0 and exactly one verdict line, a PASS,
// as the output's last line.
func checkVerdict(t *testing.T, name string, r result) {
	t.Helper()
	lines := verdictRE.FindAllString(r.stdout, -1)
	last := strings.TrimRight(r.stdout, "\n")
	last = last[strings.LastIndexByte(last, '\n')+1:]
	switch {
	case r.code != 0:
		t.Errorf("%s exited %d, want 0", name, r.code)
	case len(lines) != 1:
		t.Errorf("%s printed %d verdict lines, want exactly 1", name, len(lines))
	case !strings.HasPrefix(lines[0], "VERDICT: PASS — "):
		t.Errorf("%s: %s", name, lines[0])
	case last != lines[0]:
		t.Errorf("%s: the verdict is not the last line of its output", name)
	}
	if t.Failed() {
		t.Logf("stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
}

// databases lists the server's example databases: only those, since other
// test packages sharing the server create and drop theirs meanwhile.
func databases(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, _ := conn.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE 'pgfence\_example\_%' ORDER BY datname`)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestExamples runs every example against the shared server, at once, and
// checks each one's verdict; afterwards the server holds the same example
// databases as before: each example dropped its own.
func TestExamples(t *testing.T) {
	names := examples(t)
	build(t)
	before := databases(t)
	t.Run("each", func(t *testing.T) {
		for _, name := range names {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				r := runExample(t, name, []string{"PGFENCE_DATABASE_URL=" + pgtest.ServerURL()})
				t.Logf("%s: exit %d in %v", name, r.code, r.took.Round(time.Millisecond))
				checkVerdict(t, name, r)
			})
		}
	})
	if after := databases(t); !slices.Equal(before, after) {
		t.Errorf("the examples left databases behind:\nbefore: %v\nafter:  %v", before, after)
	}
}

// TestDemoFallback runs the demo with no server reachable: it must start a
// throwaway PostgreSQL (its fallback), say so on stderr, pass, and remove
// it.
func TestDemoFallback(t *testing.T) {
	env, tmp := noServer(t)
	r := runExample(t, "demo", env)
	checkVerdict(t, "demo", r)
	if !strings.Contains(r.stderr, "started a throwaway PostgreSQL") || !strings.Contains(r.stderr, "stopped and removed") {
		t.Errorf("stderr does not announce the throwaway server and its removal:\n%s", r.stderr)
	}
	throwawayLeft(t, tmp)
}

// TestNoServer runs an example without a fallback with no server
// reachable: it must exit 1 with a FAIL verdict, say on stderr what to set,
// and start no server.
func TestNoServer(t *testing.T) {
	env, tmp := noServer(t)
	r := runExample(t, "billing", env)
	if r.code != 1 {
		t.Errorf("billing exited %d, want 1", r.code)
	}
	if lines := verdictRE.FindAllString(r.stdout, -1); len(lines) != 1 || !strings.HasPrefix(lines[0], "VERDICT: FAIL — no PostgreSQL server") {
		t.Errorf("verdict lines: %q, want one FAIL for want of a server", lines)
	}
	for _, want := range []string{"cannot connect to the server libpq's environment names (PGHOST)", "set DATABASE_URL"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, r.stderr)
		}
	}
	if strings.Contains(r.stderr, "throwaway") || strings.Contains(r.stderr, "pgfence: started") {
		t.Errorf("billing started a server of its own:\n%s", r.stderr)
	}
	throwawayLeft(t, tmp)
}

// TestUnreachableURL runs the demo with DATABASE_URL naming a closed port:
// an explicit URL is not replaced by the fallback, so it must exit 1, name
// the variable to check, start no server, and print no password.
func TestUnreachableURL(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	env, tmp := noServer(t)
	const password = "s3cret-of-the-test"
	r := runExample(t, "demo", append(env, fmt.Sprintf("DATABASE_URL=postgres://someone:%s@127.0.0.1:%d/app", password, port)))
	if r.code != 1 {
		t.Errorf("demo exited %d, want 1", r.code)
	}
	if want := fmt.Sprintf("cannot connect to the server DATABASE_URL names (host 127.0.0.1, port %d, user someone, database app)", port); !strings.Contains(r.stderr, want) {
		t.Errorf("stderr does not say %q:\n%s", want, r.stderr)
	}
	if !strings.Contains(r.stderr, "check DATABASE_URL") {
		t.Errorf("stderr does not name the variable to check:\n%s", r.stderr)
	}
	if strings.Contains(r.stdout+r.stderr, password) {
		t.Errorf("the password was printed:\n%s\n%s", r.stdout, r.stderr)
	}
	if strings.Contains(r.stderr, "throwaway") {
		t.Errorf("the demo fell back to a server of its own:\n%s", r.stderr)
	}
	throwawayLeft(t, tmp)
}

// TestLibpqEnvironment runs an example with no URL, the test server named
// only by libpq's PG* variables: it must run on that server and pass.
func TestLibpqEnvironment(t *testing.T) {
	cfg, err := pgx.ParseConfig(pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"PGHOST=" + cfg.Host, "PGPORT=" + strconv.Itoa(int(cfg.Port)), "PGUSER=" + cfg.User,
		"PGPASSWORD=" + cfg.Password, "PGDATABASE=" + cfg.Database, "PGSSLMODE=disable"}
	r := runExample(t, "billing", env)
	checkVerdict(t, "billing", r)
	if !strings.Contains(r.stdout, "database: a fresh database on the server libpq's environment names (PGHOST, PGPORT, PGUSER,") {
		t.Errorf("billing does not say it ran on the server libpq's environment names:\n%s", r.stdout)
	}
}

// TestFallbackInterrupted interrupts the demo (SIGINT, as Ctrl-C does)
// while it runs on its throwaway server: it must exit 130 with a FAIL
// verdict, and still remove the server.
func TestFallbackInterrupted(t *testing.T) {
	env, tmp := noServer(t)
	bin := filepath.Join(build(t), "demo")
	ctx, cancel := context.WithTimeout(context.Background(), perExample)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(withoutServerSettings(os.Environ()), env...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var errText strings.Builder
	started := make(chan struct{})
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		buf := make([]byte, 4096)
		announced := false
		for {
			n, err := stderr.Read(buf)
			errText.Write(buf[:n])
			if !announced && strings.Contains(errText.String(), "started a throwaway PostgreSQL") {
				announced = true
				close(started)
			}
			if err != nil {
				return
			}
		}
	}()
	select {
	case <-started:
	case <-copied:
		cmd.Wait()
		t.Fatalf("the example ended before announcing its server:\n%s\n%s", stdout.String(), errText.String())
	}
	time.Sleep(300 * time.Millisecond) // into the scenario
	cmd.Process.Signal(os.Interrupt)
	<-copied
	cmd.Wait()
	code := cmd.ProcessState.ExitCode()
	if code != 130 {
		t.Errorf("interrupted example exited %d, want 130\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), errText.String())
	}
	if lines := verdictRE.FindAllString(stdout.String(), -1); len(lines) != 1 || !strings.HasPrefix(lines[0], "VERDICT: FAIL") {
		t.Errorf("interrupted example's verdict lines: %q, want one FAIL", lines)
	}
	if !strings.Contains(errText.String(), "stopped and removed") {
		t.Errorf("stderr does not announce the server's removal:\n%s", errText.String())
	}
	throwawayLeft(t, tmp)
}

// TestSchemaFallback runs examples as a role that may not create databases:
// each must fall back to a schema of its own in the URL's database, pass,
// and drop the schema.
func TestSchemaFallback(t *testing.T) {
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	const role = "pgfence_example_nocreatedb"
	dropRole := func(conn *pgx.Conn) {
		conn.Exec(ctx, `DO $$BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = '`+role+`') THEN
			EXECUTE 'DROP OWNED BY `+role+` CASCADE'; DROP ROLE `+role+`; END IF; END$$`)
	}
	dropRole(admin) // left by an interrupted run
	if _, err := admin.Exec(ctx, `CREATE ROLE `+role+` LOGIN NOCREATEDB`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A connection of its own: admin is closed by the time cleanups run.
		conn, err := pgx.Connect(ctx, pgtest.URL())
		if err != nil {
			t.Errorf("dropping role %s: %v", role, err)
			return
		}
		defer conn.Close(ctx)
		dropRole(conn)
	})
	if _, err := admin.Exec(ctx, `GRANT CREATE ON DATABASE `+pgx.Identifier{admin.Config().Database}.Sanitize()+` TO `+role); err != nil {
		t.Fatal(err)
	}
	cfg := admin.Config().Copy()
	cfg.User = role
	url := dbenv.ConnString(cfg)

	t.Run("each", func(t *testing.T) {
		for _, name := range examples(t) {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				r := runExample(t, name, []string{"PGFENCE_DATABASE_URL=" + url})
				checkVerdict(t, name, r)
				if !strings.Contains(r.stdout, "database: schema pgfence_example_") {
					t.Errorf("%s did not say it fell back to a schema:\n%s", name, r.stdout)
				}
			})
		}
	})
	var left int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'pgfence_example_%'`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d example schema(s) left behind", left)
	}
}

// TestDemoInterrupted interrupts the demo (SIGINT) while its worker process
// is frozen with SIGSTOP, on a throwaway server: the demo must exit 130,
// and neither the frozen worker nor the server may survive it.
func TestDemoInterrupted(t *testing.T) {
	env, tmp := noServer(t)
	cmd := exec.Command(filepath.Join(build(t), "demo"))
	cmd.Env = append(withoutServerSettings(os.Environ()), env...)
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
	workerPid := untilFrozen(stdout)
	if workerPid == 0 {
		cmd.Wait()
		t.Fatalf("the demo never froze a worker; stderr:\n%s", stderr.String())
	}
	cmd.Process.Signal(os.Interrupt)
	go io.Copy(io.Discard, stdout)
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("interrupted demo exited %d, want 130; stderr:\n%s", code, stderr.String())
	}
	if err := syscall.Kill(workerPid, 0); err == nil {
		t.Errorf("the frozen worker (pid %d) survived the demo", workerPid)
	}
	throwawayLeft(t, tmp)
}

// untilFrozen reads the demo's timeline up to the first freeze and returns
// the frozen worker's PID (0 if the demo ended first).
func untilFrozen(stdout io.Reader) int {
	pidRE := regexp.MustCompile(`pid (\d+): granted`)
	pid := 0
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if m := pidRE.FindStringSubmatch(sc.Text()); m != nil {
			pid, _ = strconv.Atoi(m[1])
		}
		if strings.Contains(sc.Text(), "FROZEN") {
			return pid
		}
	}
	return 0
}
