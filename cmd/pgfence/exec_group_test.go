package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// procGone reports whether pid no longer runs: it is not in the process
// table, or it is a zombie (PID 1 of a container may never reap orphans).
func procGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return syscall.Kill(pid, 0) != nil
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

// grandchildScript starts a grandchild in the command's group that ignores
// SIGTERM and records its pid; the direct child waits for it (and dies of
// SIGTERM at once, leaving the grandchild behind).
const grandchildScript = `sh -c 'trap "" TERM; echo "gc $$" >> "$LOG"; while :; do sleep 0.05; done' & echo "started $PGFENCE_FENCE" >> "$LOG"; wait`

func grandchildPid(t *testing.T, log string) int {
	t.Helper()
	waitFor(t, "the grandchild to start", func() bool { return fileHas(log, "gc ") && fileHas(log, "started") })
	data, _ := os.ReadFile(log)
	pid, err := strconv.Atoi(strings.Fields(strings.SplitN(string(data), "gc ", 2)[1])[0])
	if err != nil {
		t.Fatalf("log: %q", data)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	return pid
}

// TestExecLeaseLostKillsGroup: after a loss, a grandchild in the command's
// group that ignores SIGTERM must be killed when the grace ends, although
// the direct child exited at the SIGTERM (it used to outlive pgfence).
func TestExecLeaseLostKillsGroup(t *testing.T) {
	t.Parallel()
	key := randomName("lostgroup:")
	log := filepath.Join(t.TempDir(), "log")
	const grace = time.Second
	a, aErr := startExec(t, []string{"LOG=" + log}, "exec", "--database-url", pgtest.URL(),
		"--key", key, "--ttl", "1s", "--grace", grace.String(), "--", "sh", "-c", grandchildScript)
	gc := grandchildPid(t, log)
	if err := a.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1300 * time.Millisecond) // past the TTL
	b := pgfence(t, nil, "exec", "--database-url", pgtest.URL(), "--key", key, "--ttl", "5s", "--", "true")
	wantCode(t, b, 0)
	resumed := time.Now()
	if err := a.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, a); code != exitLeaseLost {
		t.Fatalf("want exit %d, got %d; stderr:\n%s", exitLeaseLost, code, aErr)
	}
	if !procGone(gc) {
		t.Fatalf("grandchild %d still runs after pgfence exited (%v after the loss); stderr:\n%s", gc, time.Since(resumed), aErr)
	}
	if took := time.Since(resumed); took > grace+2*time.Second {
		t.Fatalf("took %v to end the group (grace %v)", took, grace)
	}
	if !strings.Contains(aErr.String(), "SIGKILL") {
		t.Fatalf("no SIGKILL reported:\n%s", aErr)
	}
}

// TestExecSignalKillsGroup: SIGTERM to pgfence ends the direct child; a
// grandchild that ignores it gets SIGKILL after the grace, and the lease is
// held until then and released after.
func TestExecSignalKillsGroup(t *testing.T) {
	t.Parallel()
	key := randomName("siggroup:")
	log := filepath.Join(t.TempDir(), "log")
	const grace = time.Second
	a, aErr := startExec(t, []string{"LOG=" + log}, "exec", "--database-url", pgtest.URL(),
		"--key", key, "--ttl", "5s", "--grace", grace.String(), "--", "sh", "-c", grandchildScript)
	gc := grandchildPid(t, log)
	sent := time.Now()
	a.Process.Signal(syscall.SIGTERM)
	time.Sleep(grace / 2)
	row, err := fencedb.New(pgtest.Pool(t)).GetLease(context.Background(), key)
	if err != nil || !row.Held {
		t.Fatalf("the lease must be held while the grandchild runs: %+v %v; stderr:\n%s", row, err, aErr)
	}
	if procGone(gc) {
		t.Fatal("the grandchild was killed before the grace ended")
	}
	if code := waitExit(t, a); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("want exit %d, got %d; stderr:\n%s", 128+int(syscall.SIGTERM), code, aErr)
	}
	if !procGone(gc) {
		t.Fatalf("grandchild %d still runs after pgfence exited; stderr:\n%s", gc, aErr)
	}
	if took := time.Since(sent); took < grace || took > grace+2*time.Second {
		t.Fatalf("pgfence exited %v after the signal (grace %v)", took, grace)
	}
	row, err = fencedb.New(pgtest.Pool(t)).GetLease(context.Background(), key)
	if err != nil || row.Held {
		t.Fatalf("lease not released: %+v %v", row, err)
	}
}

// TestExecSignalToStoppedCommand: a command stopped by SIGTTIN (as one that
// reads the terminal from the background is) is not left stopped for ever:
// pgfence says so, and a SIGTERM to pgfence is forwarded with a SIGCONT, so
// that it takes effect. The command is a bash loop: dash's vfork can keep
// its group from stopping as a whole (see needBash).
func TestExecSignalToStoppedCommand(t *testing.T) {
	t.Parallel()
	key := randomName("stopped:")
	log := filepath.Join(t.TempDir(), "log")
	a := exec.Command(bin, "exec", "--database-url", pgtest.URL(), "--key", key, "--ttl", "3s",
		"--", needBash(t), "-c", `trap 'echo TERM >> "$LOG"; exit 42' TERM; echo "started $$" >> "$LOG"; while :; do sleep 0.05; done`)
	a.Env = cleanEnv("LOG=" + log)
	aErr := &syncBuffer{}
	a.Stderr = aErr
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Process.Kill() })
	waitFor(t, "the command to start", func() bool { return fileHas(log, "started") })
	data, _ := os.ReadFile(log)
	pgid, _ := strconv.Atoi(strings.Fields(string(data))[1])
	if err := syscall.Kill(-pgid, syscall.SIGTTIN); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pgfence to see the stop", func() bool { return strings.Contains(aErr.String(), "stopped by") })
	a.Process.Signal(syscall.SIGTERM)
	if code := waitExit(t, a); code != 42 {
		t.Fatalf("want the command's exit 42, got %d; stderr:\n%s", code, aErr)
	}
	if !fileHas(log, "TERM") {
		t.Fatal("the command did not act on SIGTERM")
	}
}
