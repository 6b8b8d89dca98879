// Package needtool lets a test that needs a program outside Go and
// PostgreSQL (PgBouncer, Chromium, script(1), a C compiler, Python) run when the
// program is there and otherwise skip, saying so loudly: each skipped test
// gives the reason, and once per go test run a notice names what did not
// run and how to get the program, on the terminal when there is one (go
// test shows a passing package's output only with -v) and on standard
// error. CI sets the tool's PGFENCE_REQUIRE_ variable, which turns the
// skip into a failure, so that nothing is skipped there.
package needtool

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
)

// Required reports whether the tool's variable asks for the tool.
func (tl Tool) Required() bool {
	v := os.Getenv(tl.Variable)
	return v != "" && v != "0"
}

// Missing ends t because the tool is missing (why says how that was
// found): a failure when the tool is required, else a skip, announced once
// per go test run.
func (tl Tool) Missing(t testing.TB, why error) {
	t.Helper()
	msg := fmt.Sprintf("NOT RUN without %s: %s (%v). To run it: %s. %s=1 makes this a failure.",
		tl.Name, t.Name(), why, tl.Install, tl.Variable)
	if tl.Required() {
		t.Fatal(msg)
	}
	tl.announce(msg)
	t.Skip(msg)
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

// announce writes msg once per go test run and tool: the first test binary
// of the run (the go command is every test binary's parent) to find the
// tool missing writes it to the terminal, when there is one, and to
// standard error.
func (tl Tool) announce(msg string) {
	slug := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, tl.Variable)
	mark := filepath.Join(os.TempDir(), fmt.Sprintf("pgfence-notrun-%d-%s", os.Getppid(), slug))
	f, err := os.OpenFile(mark, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, os.ErrExist) {
		return
	}
	if err == nil {
		f.Close()
	}
	notice := "\npgfence tests: " + msg + "\n\n"
	writeTo := []io.Writer{os.Stderr}
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		defer tty.Close()
		writeTo = append(writeTo, tty)
	}
	for _, w := range writeTo {
		io.WriteString(w, notice)
	}
}
