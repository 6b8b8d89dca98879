// Package needtool lets a test that needs a program outside Go and
// PostgreSQL (PgBouncer, Chromium, script(1), a C compiler, Python,
// Patroni) run when the program is there and otherwise skip, saying so
// loudly: each skipped test gives the reason, and when the package's tests
// have run, a notice names every test that did not run and how to get the
// program (see Run for where it goes). CI sets the tool's PGFENCE_REQUIRE_
// variable, which turns the skip into a failure, so that nothing is
// skipped there.
package needtool

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Tool is a program some tests need.
type Tool struct {
	// Name is how the notice names the program ("Chromium").
	Name string
	// Variable, when set to anything but "" or "0", makes a missing
	// program fail the test instead of skipping it.
	Variable string
	// Install says how to get the program.
	Install string
}

// The tools pgfence's tests need beyond Go and PostgreSQL.
var (
	// Bouncer is PgBouncer, for the tests behind a transaction pooler.
	Bouncer = Tool{"PgBouncer", "PGFENCE_REQUIRE_BOUNCER",
		"apt-get install pgbouncer (the tests start their own, in transaction mode), or set PGFENCE_BOUNCER_URL"}
	// Chromium is a headless browser, for the test of pgfence serve's live page.
	Chromium = Tool{"Chromium", "PGFENCE_REQUIRE_CHROMIUM",
		"apt-get install chromium, or set PGFENCE_CHROMIUM to a Chromium or Chrome binary"}
	// Script is script(1), which gives pgfence exec a real pseudo-terminal.
	Script = Tool{"script(1)", "PGFENCE_REQUIRE_SCRIPT", "apt-get install bsdutils (util-linux's script)"}
	// Python is a Python 3 with psycopg, for the tests where a non-Go client
	// shares keys with Go's.
	Python = Tool{"a Python with psycopg", "PGFENCE_REQUIRE_PYTHON",
		"apt-get install python3-psycopg, or point PGFENCE_PYTHON at an interpreter that has psycopg"}
	// CC is a C compiler, for the test of a threaded child process.
	CC = Tool{"a C compiler (cc)", "PGFENCE_REQUIRE_CC", "apt-get install gcc"}
	// Server is PostgreSQL's server binaries, for the tests that start a
	// cluster of their own with settings the shared one lacks.
	Server = Tool{"PostgreSQL's server binaries (initdb, postgres)", "PGFENCE_REQUIRE_SERVER",
		"apt-get install postgresql, or put its bin directory on PATH"}
	// Patroni is Patroni with etcd, for the failover suite.
	Patroni = Tool{"Patroni and etcd", "PGFENCE_REQUIRE_PATRONI", "apt-get install patroni etcd-server"}
)

// The long runs: tests that take minutes where a package takes seconds,
// run only when their variable is 1 (.ci/run sets each in a step of its
// own) and otherwise reported by Run's notice like a missing tool's tests.
var (
	// Failover is the Patroni failover drills (hasuite).
	Failover = longRun("PGFENCE_FAILOVER=1", "PGFENCE_FAILOVER",
		"PGFENCE_FAILOVER=1 go test -race -count=1 ./hasuite/ (about three minutes; .ci/run runs it in a step of its own)")
)

// longRuns holds the Variable of every long run: it runs the test rather
// than requiring a program.
var longRuns = map[string]bool{}

func longRun(name, variable, howTo string) Tool {
	longRuns[variable] = true
	return Tool{name, variable, howTo}
}

func (tl Tool) optIn() bool { return longRuns[tl.Variable] }

// OptIn lets the rest of t run when the long run tl was asked for, and
// otherwise skips t (what says what t would have done), which Run's notice
// repeats.
func (tl Tool) OptIn(t testing.TB, what string) {
	t.Helper()
	if !tl.optIn() {
		panic("needtool: OptIn is for a long run; a tool is found with LookPath or reported with Missing")
	}
	if tl.Required() {
		return
	}
	tl.Missing(t, errors.New(what))
}

// Required reports whether the tool's variable asks for the tool.
func (tl Tool) Required() bool {
	v := os.Getenv(tl.Variable)
	return v != "" && v != "0"
}

// notRun is what Missing recorded for Run's notice.
var notRun struct {
	sync.Mutex
	running bool
	tools   []*skipped // in the order they were first missing
}

// skipped is what one tool's absence skipped.
type skipped struct {
	tool    Tool
	tests   []string
	reasons []string // how its absence was found, each once
}

// Missing ends t because the tool is missing (why says how that was
// found): a failure when the tool is required, else a skip, which Run's
// notice repeats.
func (tl Tool) Missing(t testing.TB, why error) {
	t.Helper()
	msg := fmt.Sprintf("NOT RUN without %s: %s (%v). To run it: %s.%s",
		tl.Name, t.Name(), why, tl.Install, tl.requireHint())
	if tl.Required() && !tl.optIn() {
		t.Fatal(msg)
	}
	if !record(tl, t.Name(), why.Error()) {
		t.Fatal("needtool: the package's TestMain must run the tests through needtool.Run (pgtest.Main does), " +
			"or nothing says at the end what did not run: " + msg)
	}
	t.Skip(msg)
}

// requireHint says how to make the skip a failure; a long run's variable
// runs it instead.
func (tl Tool) requireHint() string {
	if tl.optIn() {
		return ""
	}
	return " " + tl.Variable + "=1 makes this a failure."
}

// LookPath finds the named program on PATH for t, or ends t as Missing
// does.
func (tl Tool) LookPath(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		tl.Missing(t, err)
	}
	return p
}

// record notes that test did not run for want of tl; false when Run is
// not running the tests.
func record(tl Tool, test, why string) bool {
	notRun.Lock()
	defer notRun.Unlock()
	if !notRun.running {
		return false
	}
	i := slices.IndexFunc(notRun.tools, func(s *skipped) bool { return s.tool == tl })
	if i < 0 {
		i = len(notRun.tools)
		notRun.tools = append(notRun.tools, &skipped{tool: tl})
	}
	s := notRun.tools[i]
	if !slices.Contains(s.tests, test) {
		s.tests = append(s.tests, test)
	}
	if !slices.Contains(s.reasons, why) {
		s.reasons = append(s.reasons, why)
	}
	return true
}

// Run runs m's tests and then, when some did not run for want of a tool,
// says which, one line per tool, and returns m.Run's code. Call it from
// TestMain (pgtest.Main does); Missing fails a test when it is not running.
//
// go test ./... shows a passing package's output only with -v, standard
// error included, so the notice goes to the package's standard error when
// that is shown (a failure, -v, -json), and otherwise also to the go
// command's own standard error (on Linux, through /proc: a terminal or a
// pipe, or a file opened for appending), or else to the terminal
// (/dev/tty), if there is one. A tool's first notice in a go test run
// says how to get the tool; the notices of later packages name their
// tests only. What tells them apart is a file in the go command's work
// directory, which it removes when it ends.
func Run(m interface{ Run() int }) int {
	notRun.Lock()
	notRun.running = true
	notRun.Unlock()
	code := m.Run()
	notRun.Lock()
	notRun.running = false
	notice := noticeLocked()
	notRun.Unlock()
	if notice != "" {
		announce(notice, code != 0 || testing.Verbose())
	}
	return code
}

// noticeLocked is the notice of what did not run, "" when everything ran.
func noticeLocked() string {
	var b strings.Builder
	for _, s := range notRun.tools {
		noun := "them"
		if len(s.tests) == 1 {
			noun = "it"
		}
		fmt.Fprintf(&b, "pgfence tests: NOT RUN without %s in %s: %s (%s).", s.tool.Name, packageName(),
			strings.Join(s.tests, ", "), strings.Join(s.reasons, "; "))
		if firstInRun(s.tool) {
			fmt.Fprintf(&b, " To run %s: %s.%s", noun, s.tool.Install, s.tool.requireHint())
		}
		b.WriteString("\n")
	}
	if b.Len() == 0 {
		return ""
	}
	return "\n" + b.String() + "\n"
}

// packageName is the tested package's directory in its module ("./pglease").
func packageName() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return filepath.Base(os.Args[0])
	}
	path := strings.TrimSuffix(bi.Path, ".test")
	if rel, ok := strings.CutPrefix(path, bi.Main.Path); ok && (rel == "" || rel[0] == '/') {
		return "." + rel
	}
	return path
}

// firstInRun reports whether this process is the first child of its
// parent (for go test, the go command) to announce tl. The mark is a file
// in the go command's work directory, which it removes when it ends; a
// binary run from elsewhere is a run of its own, always first.
func firstInRun(tl Tool) bool {
	work := workDir()
	if work == "" {
		return true
	}
	mark := filepath.Join(work, "pgfence-notrun-"+strconv.Itoa(os.Getppid())+"-"+tl.Variable)
	f, err := os.OpenFile(mark, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err == nil {
		f.Close()
	}
	return !errors.Is(err, os.ErrExist)
}

// workDir is the go command's work directory when this binary was built
// there by go test ($WORK/b001/pkg.test), else "".
func workDir() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	work := filepath.Dir(filepath.Dir(exe))
	if !strings.HasPrefix(filepath.Base(work), "go-build") {
		return ""
	}
	return work
}

// announce writes notice to standard error and, unless go test shows this
// package's output anyway (shown), where the go command's output goes.
func announce(notice string, shown bool) {
	io.WriteString(os.Stderr, notice)
	if shown {
		return
	}
	out := parentStderr()
	if out == nil {
		out, _ = os.OpenFile("/dev/tty", os.O_WRONLY, 0)
	}
	if out == nil {
		return
	}
	defer out.Close()
	if sameFile(out, os.Stderr) {
		return // go test streams this package's output there already
	}
	out.WriteString(notice) // one write: whole among the go command's lines
}

// parentStderr opens the parent process's standard error, when it can be
// written without harm: a terminal, a pipe, or a file the parent appends
// to (its own writes to a file at an offset would overwrite ours).
func parentStderr() *os.File {
	fd := "/proc/" + strconv.Itoa(os.Getppid()) + "/fd/2"
	f, err := os.OpenFile(fd, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil
	}
	fi, err := f.Stat()
	if err == nil {
		switch mode := fi.Mode(); {
		case mode&(os.ModeCharDevice|os.ModeNamedPipe) != 0:
			return f
		case mode.IsRegular() && appends(strconv.Itoa(os.Getppid())):
			return f
		}
	}
	f.Close()
	return nil
}

// appends reports whether process pid's standard error was opened with
// O_APPEND, from the octal flags line of /proc/pid/fdinfo/2.
func appends(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/fdinfo/2")
	if err != nil {
		return false
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("flags:")); ok {
			flags, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 8, 64)
			return err == nil && flags&syscall.O_APPEND != 0
		}
	}
	return false
}

func sameFile(a, b *os.File) bool {
	fa, err := a.Stat()
	if err != nil {
		return false
	}
	fb, err := b.Stat()
	return err == nil && os.SameFile(fa, fb)
}
