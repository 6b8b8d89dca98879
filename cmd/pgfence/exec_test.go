package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// TestExecNoOverlap runs several exec on one key at once; the command
// records when it enters and leaves, and no two runs may overlap.
func TestExecNoOverlap(t *testing.T) {
	t.Parallel()
	key := randomName("overlap:")
	log := filepath.Join(t.TempDir(), "log")
	script := `echo "in $(date +%s%N) $PGFENCE_FENCE" >> "$LOG"; sleep 0.2; echo "out $(date +%s%N) $PGFENCE_FENCE" >> "$LOG"`
	const n = 4
	var wg sync.WaitGroup
	results := make([]result, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = pgfence(t, []string{"LOG=" + log}, "exec", "--database-url", pgtest.URL(),
				"--key", key, "--ttl", "5s", "--wait", "30s", "--", "sh", "-c", script)
		}()
	}
	wg.Wait()
	for _, r := range results {
		wantCode(t, r, 0)
	}
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 2*n {
		t.Fatalf("want %d lines, got:\n%s", 2*n, data)
	}
	var lastOut, lastFence int64
	for i := 0; i < len(lines); i += 2 {
		in, out := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if in[0] != "in" || out[0] != "out" || in[2] != out[2] {
			t.Fatalf("runs interleaved:\n%s", data)
		}
		tin, _ := strconv.ParseInt(in[1], 10, 64)
		tout, _ := strconv.ParseInt(out[1], 10, 64)
		fence, _ := strconv.ParseInt(in[2], 10, 64)
		if tin < lastOut || tout < tin {
			t.Fatalf("runs overlap in time:\n%s", data)
		}
		if fence <= lastFence {
			t.Fatalf("fences do not increase from run to run:\n%s", data)
		}
		lastOut, lastFence = tout, fence
	}
}

// TestExecPassesLease checks that the key, the fence and the owner reach
// the command, and that the fence is the one the lease row records.
func TestExecPassesLease(t *testing.T) {
	t.Parallel()
	key := randomName("env:")
	r := pgfence(t, nil, "exec", "--database-url", pgtest.URL(), "--key", key, "--owner", "cron@host-7",
		"--", "sh", "-c", `echo "$PGFENCE_KEY|$PGFENCE_FENCE|$PGFENCE_OWNER"`)
	wantCode(t, r, 0)
	parts := strings.Split(strings.TrimSpace(r.stdout), "|")
	if len(parts) != 3 || parts[0] != key || parts[2] != "cron@host-7" {
		t.Fatalf("command saw %q", r.stdout)
	}
	fence, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || fence <= 0 {
		t.Fatalf("PGFENCE_FENCE = %q", parts[1])
	}
	row, err := fencedb.New(pgtest.Pool(t)).GetLease(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if row.Fence != fence || row.Held {
		t.Fatalf("lease row: fence %d held %v; the command saw fence %d (want equal, and released)", row.Fence, row.Held, fence)
	}
}

// startExec starts pgfence exec in the background.
func startExec(t *testing.T, env []string, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = cleanEnv(env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
	})
	return cmd, &stderr
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !holdsWithin(cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// holdsWithin reports whether cond holds within 15 s, polling it.
func holdsWithin(cond func() bool) bool {
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

func fileHas(path, s string) bool {
	b, _ := os.ReadFile(path)
	return strings.Contains(string(b), s)
}

func waitExit(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	code, left, ok := exitWithin(cmd)
	if !ok {
		t.Fatalf("pgfence exec did not exit; processes:\n%s", left)
	}
	return code
}

// exitWithin waits up to 20 s for cmd to exit and returns its status; if
// it does not, it describes the processes under cmd (see processTable),
// kills them and reports false.
func exitWithin(cmd *exec.Cmd) (code int, left string, ok bool) {
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
		return exitStatus(cmd.ProcessState), "", true
	case <-time.After(20 * time.Second):
	}
	left = processTable(cmd.Process.Pid)
	// Kill what is left and let the Wait above return before the test
	// ends: a cleanup's Wait must not run beside it.
	for _, pid := range descendants(cmd.Process.Pid) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	cmd.Process.Kill()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	return 0, left, false
}

// TestExecLeaseLost freezes a pgfence exec with SIGSTOP past its TTL while
// another exec takes the key; resumed, the first must stop its command and
// exit 83.
func TestExecLeaseLost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, script string
		wantKill     bool
	}{
		{"command stops on SIGTERM", `trap 'echo TERM >> "$LOG"; exit 3' TERM; echo "started $PGFENCE_FENCE $$" >> "$LOG"; while :; do sleep 0.05; done`, false},
		{"command ignores SIGTERM", `trap '' TERM; echo "started $PGFENCE_FENCE $$" >> "$LOG"; while :; do sleep 0.05; done`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			key := randomName("lost:")
			log := filepath.Join(t.TempDir(), "log")
			a, aErr := startExec(t, []string{"LOG=" + log}, "exec", "--database-url", pgtest.URL(),
				"--key", key, "--ttl", "1s", "--grace", "500ms", "--", "sh", "-c", tc.script)
			waitFor(t, "the command to start", func() bool { return fileHas(log, "started") })
			if err := a.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			time.Sleep(1300 * time.Millisecond) // past the TTL, by the database clock too
			b := pgfence(t, nil, "exec", "--database-url", pgtest.URL(), "--key", key, "--ttl", "5s",
				"--", "sh", "-c", `echo "$PGFENCE_FENCE"`)
			wantCode(t, b, 0)
			if err := a.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			code := waitExit(t, a)
			if code != exitLeaseLost {
				t.Fatalf("frozen exec: want exit %d, got %d; stderr:\n%s", exitLeaseLost, code, aErr)
			}
			if !strings.Contains(aErr.String(), "LEASE LOST") {
				t.Fatalf("no lease-lost message:\n%s", aErr)
			}
			data, _ := os.ReadFile(log)
			fields := strings.Fields(strings.SplitN(string(data), "\n", 2)[0])
			fenceA, _ := strconv.ParseInt(fields[1], 10, 64)
			fenceB, _ := strconv.ParseInt(strings.TrimSpace(b.stdout), 10, 64)
			if fenceB <= fenceA {
				t.Fatalf("second holder's fence %d is not above the first's %d", fenceB, fenceA)
			}
			pid, _ := strconv.Atoi(fields[2])
			if err := syscall.Kill(pid, 0); err == nil {
				t.Fatalf("the command (pid %d) still runs", pid)
			}
			if tc.wantKill {
				if !strings.Contains(aErr.String(), "SIGKILL") {
					t.Fatalf("want SIGKILL after the grace period:\n%s", aErr)
				}
			} else if !fileHas(log, "TERM") {
				t.Fatalf("the command did not get SIGTERM:\n%s\nstderr:\n%s", data, aErr)
			}
		})
	}
}

// TestExecForwardsSignals checks that SIGTERM to pgfence reaches the
// command, and that pgfence then exits with the command's status and
// releases the lease.
func TestExecForwardsSignals(t *testing.T) {
	t.Parallel()
	key := randomName("signal:")
	log := filepath.Join(t.TempDir(), "log")
	a, aErr := startExec(t, []string{"LOG=" + log}, "exec", "--database-url", pgtest.URL(), "--key", key, "--ttl", "10s",
		"--", "sh", "-c", `trap 'echo TERM >> "$LOG"; exit 42' TERM; echo started >> "$LOG"; while :; do sleep 0.05; done`)
	waitFor(t, "the command to start", func() bool { return fileHas(log, "started") })
	a.Process.Signal(syscall.SIGTERM)
	if code := waitExit(t, a); code != 42 {
		t.Fatalf("want the command's exit 42, got %d; stderr:\n%s", code, aErr)
	}
	row, err := fencedb.New(pgtest.Pool(t)).GetLease(context.Background(), key)
	if err != nil || row.Held {
		t.Fatalf("lease not released: %+v %v", row, err)
	}
}

// holdKey takes key in this process until the test ends.
func holdKey(t *testing.T, key string) *pglease.Lease {
	t.Helper()
	c, err := pglease.New(pgtest.Pool(t), pglease.WithOwner("test-holder"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	l, err := c.TryAcquire(context.Background(), key, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestExecExitCodes covers every exit code of exec but 83 (above).
func TestExecExitCodes(t *testing.T) {
	t.Parallel()
	db := pgtest.URL()
	held := randomName("held:")
	holdKey(t, held)
	noExec := filepath.Join(t.TempDir(), "not-executable")
	os.WriteFile(noExec, []byte("#!/bin/sh\necho hi\n"), 0o644)
	dead := "postgres://someone:pw@127.0.0.1:1/nothing?connect_timeout=2"
	free := func() string { return randomName("free:") }

	cases := []struct {
		name     string
		args     []string
		code     int
		inStderr string
		inStdout string
	}{
		{"no subcommand", nil, exitUsage, "no command given", ""},
		{"unknown subcommand", []string{"frobnicate"}, exitUsage, "unknown command", ""},
		{"missing --key", []string{"exec", "--database-url", db, "--", "true"}, exitUsage, "--key is required", ""},
		{"bad duration", []string{"exec", "--database-url", db, "--key", "k", "--ttl", "30", "--", "true"}, exitUsage, "not a duration", ""},
		{"no command", []string{"exec", "--database-url", db, "--key", "k"}, exitUsage, "no command given", ""},
		{"renew not below ttl", []string{"exec", "--database-url", db, "--key", "k", "--ttl", "5s", "--renew", "5s", "--", "true"}, exitUsage, "shorter than --ttl", ""},
		{"wait and skip", []string{"exec", "--database-url", db, "--key", "k", "--wait", "1s", "--skip-if-held", "--", "true"}, exitUsage, "exclude each other", ""},
		{"malformed url", []string{"exec", "--database-url", "postgres://u:pw@host:notaport/db", "--key", "k", "--", "true"}, exitUsage, "malformed", ""},
		{"success", []string{"exec", "--database-url", db, "--key", free(), "--", "true"}, 0, "", ""},
		{"command's own code", []string{"exec", "--database-url", db, "--key", free(), "--", "sh", "-c", "exit 7"}, 7, "", ""},
		{"command killed by a signal", []string{"exec", "--database-url", db, "--key", free(), "--", "sh", "-c", "kill -9 $$"}, 128 + 9, "", ""},
		{"held, --skip-if-held", []string{"exec", "--database-url", db, "--key", held, "--skip-if-held", "--", "true"}, exitHeld, "skipped", ""},
		{"held, no wait", []string{"exec", "--database-url", db, "--key", held, "--", "true"}, exitHeld, "test-holder", ""},
		{"held, --skip-if-held --conflict-exit-code 0", []string{"exec", "--database-url", db, "--key", held, "--skip-if-held", "--conflict-exit-code", "0", "--", "echo", "RAN"}, 0, "skipped (exit 0)", ""},
		{"held, no wait, --conflict-exit-code 3", []string{"exec", "--database-url", db, "--key", held, "--conflict-exit-code", "3", "--", "true"}, 3, "test-holder", ""},
		{"--conflict-exit-code out of range", []string{"exec", "--database-url", db, "--key", "k", "--conflict-exit-code", "256", "--", "true"}, exitUsage, "outside [0, 255]", ""},
		{"held, --wait runs out", []string{"exec", "--database-url", db, "--key", held, "--wait", "400ms", "--", "true"}, exitWaitExpired, "after waiting", ""},
		{"command not found", []string{"exec", "--database-url", db, "--key", free(), "--", "no-such-command-pgfence"}, exitNotFound, "command not found", ""},
		{"command not executable", []string{"exec", "--database-url", db, "--key", free(), "--", noExec}, exitCannotExec, "cannot run", ""},
		{"database unreachable fails closed", []string{"exec", "--database-url", dead, "--key", "k", "--", "echo", "RAN"}, exitUnreachable, "cannot reach the database", ""},
		{"database unreachable, --fail-open", []string{"exec", "--database-url", dead, "--key", "k", "--fail-open", "--", "sh", "-c", `echo "RAN fence=[$PGFENCE_FENCE] open=$PGFENCE_FAIL_OPEN"`}, 0, "WITHOUT a lease", "RAN fence=[] open=1"},
		{"schema missing", []string{"exec", "--database-url", emptyDatabase(t), "--key", "k", "--", "true"}, exitDBError, "pgfence migrate up", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// As if inside another pgfence exec: its variables must not leak.
			r := pgfence(t, []string{"PGFENCE_FENCE=999", "PGFENCE_KEY=outer"}, tc.args...)
			wantCode(t, r, tc.code)
			if !strings.Contains(r.stderr, tc.inStderr) || !strings.Contains(r.stdout, tc.inStdout) {
				t.Fatalf("want %q in stderr and %q in stdout; got %s", tc.inStderr, tc.inStdout, r)
			}
			if (tc.code == exitUnreachable || strings.Contains(tc.name, "conflict")) && strings.Contains(r.stdout, "RAN") {
				t.Fatal("the command ran although no lease was taken")
			}
			if tc.name == "held, --wait runs out" && r.took < 400*time.Millisecond {
				t.Fatalf("gave up after %v, before the wait", r.took)
			}
		})
	}
}

// TestDatabaseFromEnvironment checks the resolution order: DATABASE_URL,
// then the libpq PG* variables.
func TestDatabaseFromEnvironment(t *testing.T) {
	t.Parallel()
	r := pgfence(t, []string{"DATABASE_URL=" + pgtest.URL()}, "list")
	wantCode(t, r, 0)
	cfg := pgtest.Pool(t).Config().ConnConfig
	env := []string{"PGHOST=" + cfg.Host, "PGPORT=" + strconv.Itoa(int(cfg.Port)), "PGUSER=" + cfg.User,
		"PGDATABASE=" + cfg.Database, "PGSSLMODE=disable"}
	if cfg.Password != "" {
		env = append(env, "PGPASSWORD="+cfg.Password)
	}
	r = pgfence(t, env, "list")
	wantCode(t, r, 0)
	// The flag wins over the environment.
	r = pgfence(t, []string{"DATABASE_URL=postgres://x@127.0.0.1:1/x"}, "list", "--database-url", pgtest.URL())
	wantCode(t, r, 0)
}

// TestExecRenews runs a command for longer than the TTL: renewals must keep
// the lease, and the command must finish normally.
func TestExecRenews(t *testing.T) {
	t.Parallel()
	key := randomName("renew:")
	r := pgfence(t, nil, "exec", "--database-url", pgtest.URL(), "--key", key, "--ttl", "1s", "--", "sleep", "2.5")
	wantCode(t, r, 0)
	if r.took < 2500*time.Millisecond {
		t.Fatalf("took %v", r.took)
	}
}

// TestExecInterruptedWhileWaiting sends SIGINT to an exec that waits for a
// held key: it must stop waiting at once, run nothing, and exit 130.
func TestExecInterruptedWhileWaiting(t *testing.T) {
	t.Parallel()
	key := randomName("interrupt:")
	holdKey(t, key)
	log := filepath.Join(t.TempDir(), "log")
	// PGAPPNAME names the exec's sessions, so the test can see in
	// pg_stat_activity when it has tried the held key.
	app := randomName("interrupt-")
	a, aErr := startExec(t, []string{"LOG=" + log, "PGAPPNAME=" + app}, "exec", "--database-url", pgtest.URL(), "--key", key, "--wait", "30s",
		"--", "sh", "-c", `echo ran >> "$LOG"`)
	pool := pgtest.Pool(t)
	waitFor(t, "exec to try the held key", func() bool { return triedAcquire(t, pool, app) })
	start := time.Now()
	a.Process.Signal(syscall.SIGINT)
	if code := waitExit(t, a); code != 130 {
		t.Fatalf("want exit 130, got %d; stderr:\n%s", code, aErr)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("took %v to stop waiting", took)
	}
	if fileHas(log, "ran") {
		t.Fatal("the command ran")
	}
}

// triedAcquire reports whether a session named app has run an acquisition
// (the INSERT INTO lock_leases of pglease's Acquire query, as sent: with its
// schema marker; or a fair waiter's attempt, which --wait makes).
func triedAcquire(t *testing.T, pool *pgxpool.Pool, app string) bool {
	t.Helper()
	var n int
	err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE application_name = $1 AND (query LIKE '%pgfence_lease_acquire(%' OR query LIKE '%pgfence_attempt(%')`, app).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n > 0
}
