package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pgfence/pgfence/internal/testsupport/needtool"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
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

// onTerminal runs argv on a pseudo-terminal made by script(1), through
// $SHELL -c: /bin/sh unless env sets SHELL. Debian's /bin/sh (dash) forks
// and waits rather than exec the last command, so pgfence shares its
// process group with a waiting shell; bash execs, so pgfence is alone.
// oneTerminal serialises the pseudo-terminal sessions of onTerminal.
var oneTerminal sync.Mutex

func onTerminal(t *testing.T, env []string, argv ...string) (*exec.Cmd, io.WriteCloser, *syncBuffer) {
	t.Helper()
	// One terminal session at a time: several job-control sessions at once
	// on a loaded 2-core machine were seen to miss their 15 s bounds (on
	// the code before this change too); the other tests still run beside.
	oneTerminal.Lock()
	t.Cleanup(oneTerminal.Unlock)
	restoreInterrupt()
	script := needtool.Script.LookPath(t, "script")
	line := shQuote(argv[0])
	for _, a := range argv[1:] {
		line += " " + shQuote(a)
	}
	cmd := exec.Command(script, "-qec", line, "/dev/null")
	cmd.Env = cleanEnv(append([]string{"SHELL=/bin/sh"}, env...)...)
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

// interrupts receives the SIGINTs restoreInterrupt catches, to drop them.
var interrupts = make(chan os.Signal, 1)

// restoreInterrupt: a test binary started with SIGINT ignored (as a
// background job of a non-interactive shell is) passes that on to what
// runs on the terminal, and Ctrl-C there then ends only pgfence, which
// catches it (cat in a pipeline lives on). Catching SIGINT here, as the
// binary ignored it anyway, gives the processes it starts the default.
func restoreInterrupt() {
	if signal.Ignored(os.Interrupt) {
		signal.Notify(interrupts, os.Interrupt)
	}
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

// needBash is the path of bash, which these tests need: as the
// interactive shell, and to run every command that gets stopped.
// Debian's sh (dash) starts each external command with vfork(2); a stop
// signal that reaches the child before its execve stops it there, and the
// parent, waiting in the kernel for that execve, cannot stop until the
// child is continued. Such a group never stops as a whole, and its leader,
// which pgfence waits for as a shell does for its job, never reports a
// stop. bash forks: all of its group stops.
func needBash(t *testing.T) string {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("this test needs bash: %v", err)
	}
	return bash
}

// execLine is the line that runs pgfence exec on key with a 5 s lease and
// script as the command, run by bash (see needBash). The command exits 130
// on SIGINT by a trap: without one, bash waiting for a child that exits
// normally as the signal comes takes it as handled by the child and runs
// on, and a Ctrl-C would be lost now and then.
func execLine(t *testing.T, key, script string) string {
	t.Helper()
	return shQuote(bin) + " exec --database-url " + shQuote(pgtest.URL()) + " --key " + shQuote(key) + " --ttl 5s -- " + shQuote(needBash(t)) + " -c " +
		shQuote(`trap 'exit 130' INT; `+script)
}

// TestExecTerminalRead: a command that reads the terminal on stdin gets
// it (its group is the terminal's foreground group); it used to be stopped
// by SIGTTIN for ever while pgfence renewed the lease. Run through a shell
// that waits in pgfence's group (dash) and one that execs it (bash): the
// waiting shell once kept the terminal from the command.
func TestExecTerminalRead(t *testing.T) {
	for _, shell := range []string{"/bin/sh", needBash(t)} {
		t.Run(filepath.Base(shell), func(t *testing.T) {
			t.Parallel()
			key := randomName("tty:")
			cmd, in, out := inTerminal(t, []string{"SHELL=" + shell}, "exec", "--database-url", pgtest.URL(), "--key", key, "--ttl", "3s",
				"--", "sh", "-c", `read x; echo "got $x"`)
			time.Sleep(500 * time.Millisecond)
			io.WriteString(in, "hello\n")
			if code := waitTermExit(t, cmd, out); code != 0 {
				t.Fatalf("exit %d; output:\n%s", code, out)
			}
			if !strings.Contains(out.String(), "got hello") {
				t.Fatalf("the command did not read the terminal; output:\n%s", out)
			}
		})
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
		"--", "sh", "-c", `trap 'echo INT >> "$LOG"' INT; echo "started $PPID" >> "$LOG"; `+fgCheck+`; while :; do sleep 0.05; done`)
	waitTerm(t, cmd, out, "the command to start", func() bool { return fileHas(log, "GROUND") })
	if !fileHas(log, "FOREGROUND") {
		t.Fatalf("the command's group is not the terminal's foreground group; output:\n%s", out)
	}
	data, _ := os.ReadFile(log)
	pg, err := strconv.Atoi(strings.Fields(string(data))[1])
	if err != nil {
		t.Fatalf("log: %q", data)
	}
	io.WriteString(in, "\x03") // Ctrl-C
	waitTerm(t, cmd, out, "SIGINT to reach the command", func() bool { return fileHas(log, "INT") })
	time.Sleep(time.Second)
	data, _ = os.ReadFile(log)
	if n := strings.Count(string(data), "INT"); n != 1 {
		t.Fatalf("the command got SIGINT %d times, want 1; log:\n%s\noutput:\n%s", n, data, out)
	}
	syscall.Kill(pg, syscall.SIGTERM)
	if code := waitTermExit(t, cmd, out); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit %d, want %d; output:\n%s", code, 128+int(syscall.SIGTERM), out)
	}
}

// TestExecTerminalSuspend: Ctrl-Z stops the command's group (the
// terminal's foreground group), not pgfence's, so renewals never stop while
// the command runs. Under script(1) pgfence's own group is orphaned, so its
// stop is discarded, as the kernel discards a terminal stop for a command
// run directly there: pgfence continues the command (its SIGCONT trap
// says so: it was stopped), which goes on with the terminal again.
func TestExecTerminalSuspend(t *testing.T) {
	t.Parallel()
	key := randomName("ttystop:")
	log := filepath.Join(t.TempDir(), "log")
	cmd, in, out := inTerminal(t, []string{"LOG=" + log}, "exec", "--database-url", pgtest.URL(), "--key", key, "--ttl", "3s",
		"--", needBash(t), "-c", `trap 'echo CONT >> "$LOG"' CONT; echo "started $PPID" >> "$LOG"; while :; do `+fgCheck+`; sleep 0.05; done`)
	waitTerm(t, cmd, out, "the command to start", func() bool { return fileHas(log, "GROUND") })
	data, _ := os.ReadFile(log)
	pg, _ := strconv.Atoi(strings.Fields(string(data))[1])
	if fileHas(log, "BACKGROUND") || !fileHas(log, "FOREGROUND") {
		t.Fatalf("the command's group is not the terminal's foreground group; output:\n%s", out)
	}
	io.WriteString(in, "\x1a") // Ctrl-Z
	waitTerm(t, cmd, out, "the stopped command to be continued", func() bool { return fileHas(log, "CONT") })
	os.WriteFile(log, nil, 0o644)
	waitTerm(t, cmd, out, "the command to tick again", func() bool { return fileHas(log, "GROUND") })
	if fileHas(log, "BACKGROUND") {
		t.Fatalf("the command lost the terminal after its stop; output:\n%s", out)
	}
	syscall.Kill(pg, syscall.SIGTERM)
	if code := waitTermExit(t, cmd, out); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit %d, want %d; output:\n%s", code, 128+int(syscall.SIGTERM), out)
	}
}

// procState is the state letter of pid in /proc ("T" stopped), or "".
func procState(pid int) string { return statState("/proc/" + strconv.Itoa(pid) + "/stat") }

// statState is the state letter in a /proc stat file, or "".
func statState(file string) string {
	b, err := os.ReadFile(file)
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
	log := filepath.Join(t.TempDir(), "log")
	cmd, in, out := onTerminal(t, []string{"LOG=" + log}, needBash(t), "--norc", "--noprofile", "-i")
	line := execLine(t, randomName("ttyjob:"), `echo "started $PPID $$" >> "$LOG"; while :; do echo tick >> "$LOG"; sleep 0.05; done`)
	io.WriteString(in, line+"\n")
	waitTerm(t, cmd, out, "the command to start", func() bool { return fileHas(log, "tick") })
	data, _ := os.ReadFile(log)
	f := strings.Fields(string(data))
	pg, _ := strconv.Atoi(f[1])
	child, _ := strconv.Atoi(f[2])
	io.WriteString(in, "\x1a") // Ctrl-Z
	waitTerm(t, cmd, out, "the command and pgfence to stop", func() bool { return procState(child) == "T" && procState(pg) == "T" })
	io.WriteString(in, "fg\n")
	waitTerm(t, cmd, out, "the command and pgfence to go on", func() bool { return procState(child) != "T" && procState(pg) != "T" })
	before, _ := os.ReadFile(log)
	waitTerm(t, cmd, out, "the command to tick again", func() bool { b, _ := os.ReadFile(log); return len(b) > len(before) })
	io.WriteString(in, "\x03") // Ctrl-C, to the command's group, now the foreground one again
	io.WriteString(in, "echo \"rc=$?\"; exit\n")
	waitTermExit(t, cmd, out)
	if !strings.Contains(out.String(), "rc=130") {
		t.Fatalf("want rc=130 from pgfence after Ctrl-C; output:\n%s", out)
	}
}

// fgCheck logs whether the shell's process group is the terminal's
// foreground group (/proc/$$/stat: field 5 pgrp, 8 tpgid; field 2 is
// "(sh)" or "(bash)", without spaces).
const fgCheck = `set -- $(cat /proc/$$/stat); if [ "$5" = "$8" ]; then echo FOREGROUND >> "$LOG"; else echo BACKGROUND >> "$LOG"; fi`

// fgScript ticks into $LOG, each tick saying whether the command's group is
// the terminal's foreground group (/proc/$$/stat: field 5 pgrp, 8 tpgid).
const fgScript = `echo "started $PPID $$" >> "$LOG"; while :; do ` + fgCheck + `; sleep 0.05; done`

// logGrows reports whether file grows within d.
func logGrows(file string, d time.Duration) bool {
	before, _ := os.ReadFile(file)
	time.Sleep(d)
	after, _ := os.ReadFile(file)
	return len(after) > len(before)
}

// interactive starts bash -i on a terminal and types line at it; it returns
// the pids of pgfence and of the command from the first line of log.
func interactive(t *testing.T, log, line string) (*exec.Cmd, io.WriteCloser, *syncBuffer, int, int) {
	t.Helper()
	cmd, in, out := onTerminal(t, []string{"LOG=" + log}, needBash(t), "--norc", "--noprofile", "-i")
	io.WriteString(in, line+"\n")
	waitTerm(t, cmd, out, "the command to start", func() bool { return fileHas(log, "started") })
	data, _ := os.ReadFile(log)
	f := strings.Fields(string(data))
	pg, _ := strconv.Atoi(f[1])
	child, _ := strconv.Atoi(f[2])
	return cmd, in, out, pg, child
}

// TestExecTerminalBackgroundThenForeground: started with &, then brought
// to the foreground with fg, the command gets the terminal (pgfence catches
// its SIGCONT); Ctrl-Z then stops the command and pgfence (the command used
// to stay in the background, so Ctrl-Z stopped pgfence alone and the
// command ran on without renewals); fg continues both, and Ctrl-C ends the
// command (exit 130).
func TestExecTerminalBackgroundThenForeground(t *testing.T) {
	t.Parallel()
	log := filepath.Join(t.TempDir(), "log")
	line := execLine(t, randomName("ttybg:"), fgScript) + " &"
	cmd, in, out, pg, child := interactive(t, log, line)
	if !fileHas(log, "BACKGROUND") {
		waitTerm(t, cmd, out, "a tick", func() bool { return fileHas(log, "BACKGROUND") || fileHas(log, "FOREGROUND") })
	}
	if fileHas(log, "FOREGROUND") {
		t.Fatalf("the command has the terminal while pgfence runs in the background; output:\n%s", out)
	}
	io.WriteString(in, "fg\n")
	waitTerm(t, cmd, out, "the command to get the terminal after fg", func() bool { return fileHas(log, "FOREGROUND") })
	io.WriteString(in, "\x1a") // Ctrl-Z
	waitTerm(t, cmd, out, "the command and pgfence to stop", func() bool { return procState(child) == "T" && procState(pg) == "T" })
	if logGrows(log, 500*time.Millisecond) {
		t.Fatalf("the command still ticks while pgfence is stopped; output:\n%s", out)
	}
	fgThenCtrlC(t, cmd, in, out, log)
}

// TestExecTerminalBackgroundThenRead: started with &, then brought to the
// foreground with fg, a command that reads the terminal gets the line typed.
func TestExecTerminalBackgroundThenRead(t *testing.T) {
	t.Parallel()
	log := filepath.Join(t.TempDir(), "log")
	line := execLine(t, randomName("ttybgread:"), `echo "started $PPID $$" >> "$LOG"; sleep 1; echo reading >> "$LOG"; read x; echo "got $x" >> "$LOG"`) + " &"
	cmd, in, out, _, child := interactive(t, log, line)
	io.WriteString(in, "fg\n")
	waitTerm(t, cmd, out, "the command to read", func() bool { return fileHas(log, "reading") })
	time.Sleep(300 * time.Millisecond)
	if s := procState(child); s == "T" {
		t.Fatalf("the command is stopped reading the terminal after fg; output:\n%s", out)
	}
	io.WriteString(in, "hello\n")
	waitTerm(t, cmd, out, "the command to get the line", func() bool { return fileHas(log, "got hello") })
	io.WriteString(in, "echo \"rc=$?\"; exit\n")
	waitTermExit(t, cmd, out)
	if !strings.Contains(out.String(), "rc=0") {
		t.Fatalf("want rc=0; output:\n%s", out)
	}
}

// TestExecTerminalPipelineSuspend: in a pipeline pgfence's group keeps the
// terminal, so Ctrl-Z reaches pgfence (and cat), not the command: pgfence
// stops the command's group (SIGSTOP) and then itself, so nothing runs
// unrenewed; fg continues both, and Ctrl-C, forwarded, ends the command.
func TestExecTerminalPipelineSuspend(t *testing.T) {
	t.Parallel()
	log := filepath.Join(t.TempDir(), "log")
	line := execLine(t, randomName("ttypipe:"), fgScript) + " | cat"
	cmd, in, out, pg, child := interactive(t, log, line)
	waitTerm(t, cmd, out, "a tick", func() bool { return fileHas(log, "BACKGROUND") })
	io.WriteString(in, "\x1a") // Ctrl-Z
	waitTerm(t, cmd, out, "the command and pgfence to stop", func() bool { return procState(child) == "T" && procState(pg) == "T" })
	if logGrows(log, 500*time.Millisecond) {
		t.Fatalf("the command still ticks while pgfence is stopped; output:\n%s", out)
	}
	io.WriteString(in, "fg\n")
	waitTerm(t, cmd, out, "the command to tick again", func() bool { return logGrows(log, 300*time.Millisecond) })
	io.WriteString(in, "\x03") // Ctrl-C
	io.WriteString(in, "echo \"rc=${PIPESTATUS[0]}\"; exit\n")
	waitTermExit(t, cmd, out)
	if !strings.Contains(out.String(), "rc=130") {
		b, _ := os.ReadFile(log)
		t.Fatalf("want rc=130 from pgfence after Ctrl-C; output:\n%s\nlog:\n%s", out, b)
	}
}

// TestExecTerminalUnderShell: run from an interactive bash through sh -c
// (a shell that waits in pgfence's process group), the command gets the
// terminal; Ctrl-Z stops the command, pgfence and the waiting sh, so bash
// sees its job stopped; fg continues them all with the command in the
// foreground, and Ctrl-C ends it (exit 130 through sh).
func TestExecTerminalUnderShell(t *testing.T) {
	t.Parallel()
	log := filepath.Join(t.TempDir(), "log")
	inner := execLine(t, randomName("ttysh:"), fgScript)
	cmd, in, out, pg, child := interactive(t, log, "/bin/sh -c "+shQuote(inner+"; exit $?"))
	waitTerm(t, cmd, out, "a tick", func() bool { return fileHas(log, "GROUND") })
	if !fileHas(log, "FOREGROUND") {
		t.Fatalf("the command's group is not the terminal's foreground group; output:\n%s", out)
	}
	_, sh, _, _, _ := procStat("/proc/" + strconv.Itoa(pg) + "/stat")
	io.WriteString(in, "\x1a") // Ctrl-Z
	waitTerm(t, cmd, out, "the command, pgfence and sh to stop", func() bool {
		return procState(child) == "T" && procState(pg) == "T" && procState(sh) == "T"
	})
	io.WriteString(in, "jobs\n")
	waitTerm(t, cmd, out, "bash to list the job as stopped", func() bool { return strings.Contains(out.String(), "Stopped") })
	fgThenCtrlC(t, cmd, in, out, log)
}

// fgThenCtrlC brings the stopped job back with fg, waits for the command
// (fgScript) to tick in the foreground again, ends it with Ctrl-C and
// checks that the shell saw exit 130.
func fgThenCtrlC(t *testing.T, cmd *exec.Cmd, in io.Writer, out *syncBuffer, log string) {
	t.Helper()
	os.WriteFile(log, nil, 0o644)
	io.WriteString(in, "fg\n")
	waitTerm(t, cmd, out, "the command to tick in the foreground again", func() bool { return fileHas(log, "FOREGROUND") })
	io.WriteString(in, "\x03") // Ctrl-C
	io.WriteString(in, "echo \"rc=$?\"; exit\n")
	waitTermExit(t, cmd, out)
	if !strings.Contains(out.String(), "rc=130") {
		t.Fatalf("want rc=130 after Ctrl-C; output:\n%s", out)
	}
}

// waitTerm is waitFor for a terminal session: a timeout reports the state
// of every process under script(1) and what the terminal showed, since a
// stop or a continue that went astray is seen there and nowhere else.
func waitTerm(t *testing.T, cmd *exec.Cmd, out *syncBuffer, what string, cond func() bool) {
	t.Helper()
	if !holdsWithin(cond) {
		t.Fatalf("timed out waiting for %s; processes:\n%s\noutput:\n%s", what, processTable(cmd.Process.Pid), out)
	}
}

// waitTermExit is waitExit for a terminal session: a timeout also reports
// what the terminal showed.
func waitTermExit(t *testing.T, cmd *exec.Cmd, out *syncBuffer) int {
	t.Helper()
	code, left, ok := exitWithin(cmd)
	if !ok {
		t.Fatalf("pgfence exec did not exit; processes:\n%s\noutput:\n%s", left, out)
	}
	return code
}

// processTable describes pid and its descendants, one line each.
func processTable(pid int) string {
	var b strings.Builder
	for _, p := range append([]int{pid}, descendants(pid)...) {
		b.WriteString(processLine(strconv.Itoa(p)))
	}
	return b.String()
}

// processLine describes process pid from /proc: its groups (tpgid: the
// terminal's foreground group), its state and each thread's, where it
// sleeps in the kernel, its pending, ignored and caught signals (hex
// masks, bit N-1 for signal N) and its command line; "" if it is gone.
func processLine(pid string) string {
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	threads := ""
	tasks, _ := filepath.Glob("/proc/" + pid + "/task/*/stat")
	for _, task := range tasks {
		threads += statState(task)
	}
	wchan, _ := os.ReadFile("/proc/" + pid + "/wchan")
	status, _ := os.ReadFile("/proc/" + pid + "/status")
	var masks []string
	for _, line := range strings.Split(string(status), "\n") {
		k, v, _ := strings.Cut(line, ":")
		switch k {
		case "SigPnd", "ShdPnd", "SigIgn", "SigCgt":
			masks = append(masks, k+"="+strings.TrimLeft(strings.TrimSpace(v), "0"))
		}
	}
	cmdline, _ := os.ReadFile("/proc/" + pid + "/cmdline")
	return fmt.Sprintf("pid %s ppid %s pgrp %s tpgid %s state %s threads %s wchan %s %s %.100q\n",
		pid, f[1], f[2], f[5], f[0], threads, wchan, strings.Join(masks, " "), bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
}
