package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfence/pgfence/internal/pgdb"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// A short run: 2 processes x 3 goroutines on 2 keys for 2 s.
var verifyShort = []string{"--processes", "2", "--goroutines", "3", "--keys", "2", "--duration", "2s"}

func verifyArgs(extra ...string) []string {
	return append(append([]string{"verify"}, verifyShort...), extra...)
}

// verifyJSON runs verify --json and parses its output.
func verifyJSON(t *testing.T, env []string, args ...string) (verifyResult, result) {
	t.Helper()
	r := pgfence(t, env, append(verifyArgs("--json"), args...)...)
	var res verifyResult
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("verify --json: %v\n%s", err, r)
	}
	return res, r
}

// scratchSchemas counts verify's scratch schemas in the database at url.
func scratchSchemas(t *testing.T, url string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'pgfence\_verify\_%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func wantChecks(t *testing.T, res verifyResult, r result) {
	t.Helper()
	wantCode(t, r, exitOK)
	if !res.Pass || res.Verdict != "PASS" || len(res.Checks) != 5 {
		t.Fatalf("verdict %s, checks %+v\n%s", res.Verdict, res.Checks, r)
	}
	for _, c := range res.Checks {
		if !c.Pass {
			t.Fatalf("check %s failed: %s\n%s", c.Name, c.Detail, r)
		}
	}
	if res.Grants < 10 || res.GrantsPerSecond <= 0 || res.AcquireMs.Samples != res.Grants || res.HandoffMs.Samples == 0 ||
		res.FencedWrites.Acknowledged == 0 || res.AuditWrites.Acknowledged < 2*res.FencedWrites.Acknowledged {
		t.Fatalf("figures: %+v\n%s", res, r)
	}
}

// verify passes on a direct connection to a sound server, never prints the
// password, and drops its scratch schema.
func TestVerifyDirect(t *testing.T) {
	t.Parallel()
	const password = "pw-V3r1fy-c0de"
	db := passwordRole(t, password)
	res, r := verifyJSON(t, nil, "--database-url", db)
	wantChecks(t, res, r)
	if strings.Contains(r.stdout+r.stderr, password) {
		t.Fatalf("the password was printed:\n%s", r)
	}
	if !strings.HasPrefix(res.Scratch, "pgfence_verify_") || res.Processes != 2 || res.Goroutines != 3 || res.Keys != 2 {
		t.Fatalf("run settings: %+v", res)
	}
	ctx := context.Background()
	var n int
	if err := pgtest.Pool(t).QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", res.Scratch).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the scratch schema %s is still there (%d, %v)", res.Scratch, n, err)
	}
}

// verify passes through PgBouncer in transaction mode, with the database
// from DATABASE_URL, and says so in text.
func TestVerifyBouncer(t *testing.T) {
	t.Parallel()
	url := pgtest.BouncerURL(t)
	r := pgfence(t, []string{"DATABASE_URL=" + url}, verifyArgs()...)
	wantCode(t, r, exitOK)
	for _, want := range []string{"from DATABASE_URL", "grants ", "acquire ", "p50 ", "hand-off ", "PASS  overlap", "verdict: PASS"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("verify through PgBouncer lacks %q:\n%s", want, r)
		}
	}
}

// A check that cannot fail is not a check: a trigger that makes every
// grant expire at once lets the next waiter in while its holder still
// writes, and verify must say so and exit 1.
func TestVerifyCatchesOverlap(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t)
	s := pgx.Identifier{schema}.Sanitize()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	for _, stmt := range []string{
		"CREATE FUNCTION " + s + ".verify_test_break() RETURNS trigger LANGUAGE plpgsql AS " +
			"$$ BEGIN NEW.expires_at := now() - interval '1 second'; RETURN NEW; END $$",
		"CREATE TRIGGER verify_test_break BEFORE INSERT OR UPDATE ON " + s + ".lock_leases FOR EACH ROW EXECUTE FUNCTION " + s + ".verify_test_break()",
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	res, r := verifyJSON(t, nil, "--database-url", pgtest.URL(), "--schema", schema, "--hold", "5ms")
	wantCode(t, r, exitFailed)
	if res.Pass || res.Verdict != "FAIL" {
		t.Fatalf("verdict %s:\n%s", res.Verdict, r)
	}
	failed := map[string]string{}
	for _, c := range res.Checks {
		if !c.Pass {
			failed[c.Name] = c.Detail
		}
	}
	if d, ok := failed[checkOverlap]; !ok || !strings.Contains(d, "started while another holder") {
		t.Fatalf("no overlap reported: %+v\n%s", res.Checks, r)
	}
	if _, ok := failed[checkWorkload]; ok {
		t.Fatalf("the workload itself failed: %+v\n%s", res.Checks, r)
	}

	// And in text.
	r = pgfence(t, nil, append(verifyArgs("--hold", "5ms"), "--database-url", pgtest.URL(), "--schema", schema)...)
	wantCode(t, r, exitFailed)
	if !strings.Contains(r.stdout, "FAIL  overlap") || !strings.Contains(r.stdout, "verdict: FAIL") {
		t.Fatalf("text output:\n%s", r)
	}
}

func TestVerifyUsageAndConnection(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--processes", "0"},
		{"--keys", "-1"},
		{"--duration", "10"},
		{"--ttl", "1s", "--hold", "100ms"},
		{"extra"},
	} {
		r := pgfence(t, nil, append([]string{"verify", "--database-url", pgtest.URL()}, args...)...)
		wantCode(t, r, exitUsage)
	}
	r := pgfence(t, nil, "verify", "--database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2&sslmode=disable")
	wantCode(t, r, exitUnreachable)
	r = pgfence(t, nil, "verify", "--database-url", emptyDatabase(t))
	wantCode(t, r, exitDBError)
	if !strings.Contains(r.stderr, "pgfence migrate up") {
		t.Fatalf("no hint to migrate:\n%s", r)
	}
	r = pgfence(t, nil, "verify", "-h")
	wantCode(t, r, exitOK)
	if !strings.Contains(r.stderr, "overlap") {
		t.Fatalf("help:\n%s", r)
	}
}

// migratedDatabase is a database of its own with pgfence migrated, for
// tests that count verify's scratch schemas.
func migratedDatabase(t *testing.T) string {
	t.Helper()
	db := emptyDatabase(t)
	wantCode(t, pgfence(t, nil, "migrate", "up", "--database-url", db), exitOK)
	return db
}

// startVerify starts a long verify on db and returns once it printed its
// header (the scratch schema exists, the workers are starting).
func startVerify(t *testing.T, db string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(bin, "verify", "--duration", "60s", "--database-url", db)
	cmd.Env = cleanEnv()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	header := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		header <- line
		out.Read(make([]byte, 1<<16))
	}()
	select {
	case line := <-header:
		if !strings.HasPrefix(line, "pgfence verify: ") {
			t.Fatalf("header %q; stderr:\n%s", line, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no header; stderr:\n%s", stderr.String())
	}
	return cmd, &stderr
}

// Ctrl-C stops the workers and drops the scratch schema; verify exits
// 128+SIGINT.
func TestVerifyInterrupt(t *testing.T) {
	t.Parallel()
	db := migratedDatabase(t)
	cmd, stderr := startVerify(t, db)
	if n := scratchSchemas(t, db); n != 1 {
		t.Fatalf("%d scratch schemas during the run", n)
	}
	time.Sleep(2 * time.Second) // into the workload
	cmd.Process.Signal(syscall.SIGINT)
	start := time.Now()
	err := cmd.Wait()
	ee, ok := err.(*exec.ExitError)
	if !ok || exitStatus(ee.ProcessState) != 130 {
		t.Fatalf("verify after SIGINT: %v; stderr:\n%s", err, stderr)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("verify took %v to stop", took)
	}
	if !strings.Contains(stderr.String(), "interrupted") {
		t.Fatalf("stderr:\n%s", stderr)
	}
	if n := scratchSchemas(t, db); n != 0 {
		t.Fatalf("%d scratch schemas left after the interrupt", n)
	}
}

// Workers die with verify, even when it is killed outright.
func TestVerifyWorkersDieWithIt(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("finds the workers in /proc")
	}
	t.Parallel()
	db := migratedDatabase(t)
	cmd, _ := startVerify(t, db)
	var workers []int
	deadline := time.Now().Add(20 * time.Second)
	for len(workers) < 3 && time.Now().Before(deadline) {
		workers = childrenOf(t, cmd.Process.Pid)
		time.Sleep(50 * time.Millisecond)
	}
	if len(workers) != 3 {
		t.Fatalf("found workers %v, want 3", workers)
	}
	cmd.Process.Kill()
	cmd.Wait()
	deadline = time.Now().Add(20 * time.Second)
	for _, pid := range workers {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("worker %d outlived verify", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(t *testing.T, pid int) []int {
	t.Helper()
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var kids []int
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			n, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			kids = append(kids, n)
		}
	}
	return kids
}

// alive tells whether pid runs (a zombie counts as gone).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || !strings.HasPrefix(strings.TrimSpace(string(b[i+1:])), "Z")
}

// Each check fails on a record that breaks it, and only that check.
func TestVerifyChecksFail(t *testing.T) {
	o := verifyOpts{processes: 1, goroutines: 2, keys: 1, duration: time.Second, ttl: 10 * time.Second, hold: time.Millisecond}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) *time.Time { v := t0.Add(time.Duration(ms) * time.Millisecond); return &v }
	sound := func() ([]holdRec, []auditRow, []resourceRow) {
		holds := []holdRec{
			{ID: "a", Key: 0, Fence: 10, AcquireUS: 900, Audit: outOK, Write: outOK, End: outOK},
			{ID: "b", Key: 0, Fence: 11, AcquireUS: 1100, Audit: outOK, Write: outOK, End: outOK},
			{ID: "c", Key: 0, Fence: 13, AcquireUS: 1500, Audit: outOK, Write: outOK, End: outOK},
		}
		audit := []auditRow{
			{id: "a", key: 0, fence: 10, owner: "w0", started: *at(0), ended: at(2)},
			{id: "b", key: 0, fence: 11, owner: "w1", started: *at(3), ended: at(5)},
			{id: "c", key: 0, fence: 13, owner: "w0", started: *at(7), ended: at(9)},
		}
		return holds, audit, []resourceRow{{key: 0, lastFence: 13, writes: 3}}
	}
	run := func(holds []holdRec, audit []auditRow, res []resourceRow) verifyResult {
		return judge(o, []workerReport{{Holds: holds}}, audit, res)
	}
	failedOnly := func(t *testing.T, r verifyResult, name string) {
		t.Helper()
		for _, c := range r.Checks {
			if c.Pass == (c.Name == name) {
				t.Fatalf("check %s pass=%v: %s (want only %q to fail)", c.Name, c.Pass, c.Detail, name)
			}
		}
		if r.Pass || r.Verdict != "FAIL" {
			t.Fatalf("verdict %s", r.Verdict)
		}
	}

	r := run(sound())
	if !r.Pass || r.Grants != 3 || r.HandoffMs.P50 != 1 || r.HandoffMs.Max != 2 || r.AcquireMs.P50 != 1.1 {
		t.Fatalf("sound record: %+v", r)
	}

	t.Run("overlap", func(t *testing.T) {
		h, a, res := sound()
		a[1].started = *at(1) // b starts before a ended
		failedOnly(t, run(h, a, res), checkOverlap)
	})
	t.Run("overlap with a short holder in between", func(t *testing.T) {
		h, a, res := sound()
		a[0].ended = at(8) // a outlasts b and overlaps c too
		r := run(h, a, res)
		failedOnly(t, r, checkOverlap)
		if c := r.Checks[1]; !strings.HasPrefix(c.Detail, "2 holders") {
			t.Fatalf("overlap detail: %s", c.Detail)
		}
	})
	t.Run("fence order", func(t *testing.T) {
		h, a, res := sound()
		a[2].fence, h[2].Fence = 11, 11
		res[0].lastFence = 11
		failedOnly(t, run(h, a, res), checkOrder)
	})
	t.Run("acknowledged audit row missing", func(t *testing.T) {
		h, a, res := sound()
		failedOnly(t, run(h, a[:2], res), checkAcked)
	})
	t.Run("acknowledged end missing", func(t *testing.T) {
		h, a, res := sound()
		a[2].ended = nil
		failedOnly(t, run(h, a, res), checkAcked)
	})
	t.Run("last fence behind", func(t *testing.T) {
		h, a, res := sound()
		res[0].lastFence = 11
		failedOnly(t, run(h, a, res), checkAcked)
	})
	t.Run("a write lost", func(t *testing.T) {
		h, a, res := sound()
		res[0].writes = 2
		failedOnly(t, run(h, a, res), checkAcked)
	})
	t.Run("an unanswered write may have landed", func(t *testing.T) {
		h, a, res := sound()
		h = append(h, holdRec{ID: "d", Key: 0, Fence: 14, Audit: outOK, Write: outUnknown, End: outUnknown})
		a = append(a, auditRow{id: "d", key: 0, fence: 14, owner: "w1", started: *at(10)})
		res[0].lastFence, res[0].writes = 14, 4
		if r := run(h, a, res); !r.Pass {
			t.Fatalf("%+v", r.Checks)
		}
	})
	t.Run("refused", func(t *testing.T) {
		h, a, res := sound()
		h[1].Write = outRefused
		res[0].writes = 2
		failedOnly(t, run(h, a, res), checkFenced)
	})
	t.Run("nothing recorded", func(t *testing.T) {
		failedOnly(t, run(nil, nil, []resourceRow{{key: 0}}), checkWorkload)
	})
}

// A statement's outcome: an ERROR rolled it back, nothing sent did
// nothing, and anything else may have committed.
func TestVerifyOutcomeOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want outcome
	}{
		{nil, outOK},
		{&pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "23505"}, outFailed},
		{fmt.Errorf("wrapped: %w", &pgconn.PgError{Severity: "ERROR", Code: "42P01"}), outFailed},
		// Terminated while waiting for a synchronous standby: committed locally.
		{&pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P01"}, outUnknown},
		{&pgconn.PgError{Severity: "ERROR", Code: "08006"}, outUnknown},
		{&pgdb.NotSentError{Err: context.DeadlineExceeded}, outFailed},
		{io.ErrUnexpectedEOF, outUnknown},
		{context.DeadlineExceeded, outUnknown},
	} {
		if got := outcomeOf(tc.err); got != tc.want {
			t.Errorf("outcomeOf(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
