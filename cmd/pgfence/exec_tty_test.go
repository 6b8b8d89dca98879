package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgfence/pgfence/internal/pgtest"
)

func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// inTerminal runs pgfence with args on a pseudo-terminal made by
// script(1) (util-linux): pgfence's stdin is the terminal and its process
// group the terminal's foreground group. What the test writes to the
// returned writer is typed at the terminal.
func inTerminal(t *testing.T, env []string, args ...string) (*exec.Cmd, io.WriteCloser, *syncBuffer) {
	t.Helper()
	return onTerminal(t, env, append([]string{bin}, args...)...)
}

// onTerminal runs argv on a pseudo-terminal made by script(1).
func onTerminal(t *testing.T, env []string, argv ...string) (*exec.Cmd, io.WriteCloser, *syncBuffer) {
	t.Helper()
	script, err := exec.LookPath("script")
	if err != nil {
		t.Fatalf("these tests need script(1) from util-linux: %v", err)
	}
	line := shQuote(argv[0])
	for _, a := range argv[1:] {
		line += " " + shQuote(a)
	}
	cmd := exec.Command(script, "-qec", line, "/dev/null")
	cmd.Env = cleanEnv(env...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		// A failed test may leave pgfence and its command behind script.
		for _, pid := range descendants(cmd.Process.Pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, in, out
}

// descendants lists the processes under pid, from /proc.
func descendants(pid int) []int {
	parent := map[int]int{}
	names, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		f := strings.Fields(string(b[i+1:]))
		p, _ := strconv.Atoi(strings.Fields(string(b))[0])
		if len(f) > 1 {
			parent[p], _ = strconv.Atoi(f[1])
		}
	}
	var out []int
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// TestExecTerminalRead: a command that reads the terminal on stdin gets
// it (its group is the terminal's foreground group); it used to be stopped
// by SIGTTIN for ever while pgfence renewed the lease.
func TestExecTerminalRead(t *testing.T) {
	t.Parallel()
	key := randomName("tty:")
	cmd, in, out := inTerminal(t, nil, "exec", "--database-url", pgtest.URL(), "--key", key, "--ttl", "3s",
		"--", "sh", "-c", `read x; echo "got $x"`)
	time.Sleep(500 * time.Millisecond)
	io.WriteString(in, "hello\n")
	if code := waitExit(t, cmd); code != 0 {
		t.Fatalf("exit %d; output:\n%s", code, out)
	}
	if !strings.Contains(out.String(), "got hello") {
		t.Fatalf("the command did not read the terminal; output:\n%s", out)
	}
}

// TestExecTerminalInterrupt: Ctrl-C at the terminal reaches the command's
// group once, directly (pgfence, in the background, does not forward it a
// second time); a SIGTERM to pgfence is still forwarded.
func TestExecTerminalInterrupt(t *testing.T) {
	t.Parallel()
	key := randomName("ttyint:")
	log := filepath.Join(t.TempDir(), "log")
	cmd, in, out := inTerminal(t, []string{"LOG=" + log}, "exec", "--database-url", pgtest.URL(), "--key", key, "--ttl", "3s",
		"--", "sh", "-c", `trap 'echo INT >> "$LOG"' INT; echo "started $PPID" >> "$LOG"; while :; do sleep 0.05; done`)
	waitFor(t, "the command to start", func() bool { return fileHas(log, "started") })
	data, _ := os.ReadFile(log)
	pg, err := strconv.Atoi(strings.Fields(string(data))[1])
	if err != nil {
		t.Fatalf("log: %q", data)
	}
	io.WriteString(in, "\x03") // Ctrl-C
	waitFor(t, "SIGINT to reach the command", func() bool { return fileHas(log, "INT") })
	time.Sleep(time.Second)
	data, _ = os.ReadFile(log)
	if n := strings.Count(string(data), "INT"); n != 1 {
		t.Fatalf("the command got SIGINT %d times, want 1; log:\n%s\noutput:\n%s", n, data, out)
	}
	syscall.Kill(pg, syscall.SIGTERM)
	if code := waitExit(t, cmd); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit %d, want %d; output:\n%s", code, 128+int(syscall.SIGTERM), out)
	}
}

// TestExecTerminalSuspend: Ctrl-Z stops the command's group (the
// terminal's foreground group), not pgfence's, so renewals never stop while
// the command runs. Under script(1) pgfence's own group is orphaned, so its
// stop is discarded, as the kernel discards a terminal stop for a command
// run directly there: pgfence continues the command, which goes on.
func TestExecTerminalSuspend(t *testing.T) {
	t.Parallel()
	key := randomName("ttystop:")
	log := filepath.Join(t.TempDir(), "log")
	cmd, in, out := inTerminal(t, []string{"LOG=" + log}, "exec", "--database-url", pgtest.URL(), "--key", key, "--ttl", "3s",
		"--", "sh", "-c", `echo "started $PPID" >> "$LOG"; while :; do echo tick >> "$LOG"; sleep 0.05; done`)
	waitFor(t, "the command to start", func() bool { return fileHas(log, "tick") })
	data, _ := os.ReadFile(log)
	pg, _ := strconv.Atoi(strings.Fields(string(data))[1])
	io.WriteString(in, "\x1a") // Ctrl-Z
	time.Sleep(500 * time.Millisecond)
	before, _ := os.ReadFile(log)
	time.Sleep(500 * time.Millisecond)
	after, _ := os.ReadFile(log)
	if len(after) <= len(before) {
		t.Fatalf("the command stays stopped after Ctrl-Z; output:\n%s", out)
	}
	syscall.Kill(pg, syscall.SIGTERM)
	if code := waitExit(t, cmd); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit %d, want %d; output:\n%s", code, 128+int(syscall.SIGTERM), out)
	}
}

// procState is the state letter of pid in /proc ("T" stopped), or "".
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return f[0]
}

// TestExecTerminalJobControl runs pgfence from an interactive bash on a
// pseudo-terminal: Ctrl-Z stops the command and then pgfence (the shell
// sees its job stopped; nothing runs unrenewed), fg continues both with the
// command in the foreground, and Ctrl-C ends the command (exit 130).
func TestExecTerminalJobControl(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("this test needs bash: %v", err)
	}
	key := randomName("ttyjob:")
	log := filepath.Join(t.TempDir(), "log")
	cmd, in, out := onTerminal(t, []string{"LOG=" + log}, bash, "--norc", "--noprofile", "-i")
	line := shQuote(bin) + " exec --database-url " + shQuote(pgtest.URL()) + " --key " + shQuote(key) + " --ttl 5s -- sh -c " +
		shQuote(`echo "started $PPID $$" >> "$LOG"; while :; do echo tick >> "$LOG"; sleep 0.05; done`)
	io.WriteString(in, line+"\n")
	waitFor(t, "the command to start", func() bool { return fileHas(log, "tick") })
	data, _ := os.ReadFile(log)
	f := strings.Fields(string(data))
	pg, _ := strconv.Atoi(f[1])
	child, _ := strconv.Atoi(f[2])
	io.WriteString(in, "\x1a") // Ctrl-Z
	waitFor(t, "the command and pgfence to stop", func() bool { return procState(child) == "T" && procState(pg) == "T" })
	io.WriteString(in, "fg\n")
	waitFor(t, "the command and pgfence to go on", func() bool { return procState(child) != "T" && procState(pg) != "T" })
	before, _ := os.ReadFile(log)
	waitFor(t, "the command to tick again", func() bool { b, _ := os.ReadFile(log); return len(b) > len(before) })
	io.WriteString(in, "\x03") // Ctrl-C, to the command's group, now the foreground one again
	io.WriteString(in, "echo \"rc=$?\"; exit\n")
	waitExit(t, cmd)
	if !strings.Contains(out.String(), "rc=130") {
		t.Fatalf("want rc=130 from pgfence after Ctrl-C; output:\n%s", out)
	}
}
