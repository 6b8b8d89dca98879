package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgfence/pgfence/internal/testsupport/needtool"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// zombieLeaderC ignores SIGTERM, records its pid, and ends its main thread
// with pthread_exit while another thread runs on: /proc/PID/stat then shows
// the process as a zombie (state Z) although it runs.
const zombieLeaderC = `#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static void *spin(void *arg) { for (;;) usleep(50000); return arg; }
int main(void) {
	signal(SIGTERM, SIG_IGN);
	pthread_t t;
	pthread_create(&t, NULL, spin, NULL);
	FILE *f = fopen(getenv("LOG"), "a");
	fprintf(f, "gc %d\n", (int)getpid());
	fclose(f);
	pthread_exit(NULL);
}
`

// threadsGone reports whether no thread of pid runs any more.
func threadsGone(pid int) bool {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/stat")
	for _, name := range tasks {
		if b, err := os.ReadFile(name); err == nil {
			if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); len(f) > 0 && f[0] != "Z" && f[0] != "X" {
				return false
			}
		}
	}
	return true
}

// TestExecLeaseLostKillsThreadedZombie: after a loss, a process of the
// command's group whose main thread has exited (a zombie to /proc/PID/stat)
// while another thread runs and ignores SIGTERM is killed when the grace
// ends (it was taken for gone and ran on after pgfence exited).
func TestExecLeaseLostKillsThreadedZombie(t *testing.T) {
	t.Parallel()
	cc := needtool.CC.LookPath(t, "cc")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "zl.c"), []byte(zombieLeaderC), 0o644); err != nil {
		t.Fatal(err)
	}
	zl := filepath.Join(dir, "zl")
	if out, err := exec.Command(cc, "-pthread", "-o", zl, filepath.Join(dir, "zl.c")).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	key := randomName("lostthread:")
	log := filepath.Join(dir, "log")
	const grace = time.Second
	a, aErr := startExec(t, []string{"LOG=" + log}, "exec", "--database-url", pgtest.URL(),
		"--key", key, "--ttl", "1s", "--grace", grace.String(), "--", "sh", "-c", shQuote(zl)+` & echo started >> "$LOG"; wait`)
	gc := grandchildPid(t, log)
	waitFor(t, "the main thread to exit", func() bool { return procState(gc) == "Z" })
	if threadsGone(gc) {
		t.Fatal("the process's other thread does not run")
	}
	if err := a.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1300 * time.Millisecond) // past the TTL
	b := pgfence(t, nil, "exec", "--database-url", pgtest.URL(), "--key", key, "--ttl", "5s", "--", "true")
	wantCode(t, b, 0)
	if err := a.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, a); code != exitLeaseLost {
		t.Fatalf("want exit %d, got %d; stderr:\n%s", exitLeaseLost, code, aErr)
	}
	waitFor(t, "the killed threads to end", func() bool { return threadsGone(gc) })
	if !strings.Contains(aErr.String(), "SIGKILL") {
		t.Fatalf("no SIGKILL reported (the group was taken for gone before the grace ended):\n%s", aErr)
	}
}
