package needtool

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	if os.Getenv("NEEDTOOL_CHILD") == "without Run" {
		os.Exit(m.Run())
	}
	os.Exit(Run(m))
}

var fake = Tool{"a program no machine has", "PGFENCE_REQUIRE_NEEDTOOL_FAKE", "nothing to install"}

const (
	notice = "pgfence tests: NOT RUN without a program no machine has in ./internal/testsupport/needtool: TestHelperMissing"
	how    = "To run it: nothing to install. PGFENCE_REQUIRE_NEEDTOOL_FAKE=1 makes this a failure."
)

// TestHelperMissing is run by TestMissing in a child process.
func TestHelperMissing(t *testing.T) {
	if os.Getenv("NEEDTOOL_CHILD") == "" {
		t.Skip("run by TestMissing")
	}
	fake.LookPath(t, "pgfence-no-such-program")
	t.Fatal("LookPath of a missing program returned")
}

// child runs this test binary's TestHelperMissing, with args, times
// times from one shell, the parent of each run; the shell's script
// redirects each run's output. It returns the shell's combined output and
// fails t if a file is left in the children's TMPDIR.
func child(t *testing.T, times int, redirect string, args []string, env ...string) (string, error) {
	t.Helper()
	tmp := t.TempDir()
	// Started in the background, each run is the shell's child with a
	// redirection of its own: a foreground command may be exec'd in the
	// shell's place, and dash redirects its own descriptors around one.
	script := strings.Repeat(`"$@" `+redirect+" & wait $! || exit\n", times)
	cmd := exec.Command("sh", append([]string{"-c", script, "sh", os.Args[0], "-test.run=^TestHelperMissing$"}, args...)...)
	cmd.Env = append(os.Environ(), append([]string{"NEEDTOOL_CHILD=1", "TMPDIR=" + tmp}, env...)...)
	out, err := cmd.CombinedOutput()
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("files left in TMPDIR: %v", left)
	}
	return string(out), err
}

// A missing program skips the test with the reason and how to get it; when
// the package's tests have run, a notice repeats what did not run, where
// go test shows it, and leaves no file behind. With the tool's variable
// set, the skip is a failure.
func TestMissing(t *testing.T) {
	t.Run("shown output", func(t *testing.T) {
		// With -v (or a failure) go test shows the package's output: the
		// notice is in it, once, after the tests.
		out, err := child(t, 1, "", []string{"-test.v"})
		skip := strings.Index(out, "--- SKIP: TestHelperMissing")
		if err != nil || skip < 0 || !strings.Contains(out, "nothing to install") {
			t.Fatalf("err %v, output:\n%s", err, out)
		}
		if n := strings.Count(out, notice); n != 1 || strings.Index(out, notice) < skip || !strings.Contains(out, how) {
			t.Errorf("want the notice once, after the test, saying how to run it; output:\n%s", out)
		}
	})

	t.Run("hidden output", func(t *testing.T) {
		// Without -v go test discards a passing package's output: the
		// notice goes to the parent's standard error, the first time with
		// how to get the tool.
		if _, err := os.Stat("/proc/self/fd/2"); err != nil {
			t.Skip("the parent's standard error is reached through /proc; here the notice goes to /dev/tty")
		}
		out, err := child(t, 2, ">/dev/null 2>&1", nil)
		if err != nil || strings.Count(out, notice) != 2 || strings.Count(out, how) < 1 {
			t.Fatalf("want the notice twice, how to run it at least once; err %v, output:\n%q", err, out)
		}
		if workDir() != "" && strings.Count(out, how) != 1 {
			t.Errorf("run from go test's work directory, the second run of the same parent must not repeat how to run it:\n%s", out)
		}
	})

	t.Run("required", func(t *testing.T) {
		out, err := child(t, 1, "", []string{"-test.v"}, fake.Variable+"=1")
		var exit *exec.ExitError
		if !errors.As(err, &exit) || !strings.Contains(out, "--- FAIL: TestHelperMissing") {
			t.Fatalf("err %v, output:\n%s", err, out)
		}
	})

	t.Run("without Run", func(t *testing.T) {
		// A TestMain that does not call Run would lose the notice: the
		// skip becomes a failure that says so.
		out, err := child(t, 1, "", []string{"-test.v"}, "NEEDTOOL_CHILD=without Run")
		if err == nil || !strings.Contains(out, "must run the tests through needtool.Run") {
			t.Fatalf("err %v, output:\n%s", err, out)
		}
	})
}

var fakeLong = longRun("PGFENCE_NEEDTOOL_FAKE_LONG=1", "PGFENCE_NEEDTOOL_FAKE_LONG", "PGFENCE_NEEDTOOL_FAKE_LONG=1 go test")

// TestHelperLongRun is run by TestLongRun in a child process.
func TestHelperLongRun(t *testing.T) {
	if os.Getenv("NEEDTOOL_CHILD") == "" {
		t.Skip("run by TestLongRun")
	}
	fakeLong.OptIn(t, "a drill of minutes")
	t.Log("the long run ran")
}

// A long run not asked for is skipped with Run's notice, which says how to
// run it and nothing about a failure; asked for, it runs.
func TestLongRun(t *testing.T) {
	run := []string{"-test.v", "-test.run=^TestHelperLongRun$"}
	out, err := child(t, 1, "", run)
	want := "pgfence tests: NOT RUN without PGFENCE_NEEDTOOL_FAKE_LONG=1 in ./internal/testsupport/needtool: TestHelperLongRun (a drill of minutes). To run it: PGFENCE_NEEDTOOL_FAKE_LONG=1 go test.\n"
	if err != nil || !strings.Contains(out, "--- SKIP: TestHelperLongRun") || !strings.Contains(out, want) || strings.Contains(out, "failure") {
		t.Fatalf("not asked for: err %v, want a skip and the notice %q; output:\n%s", err, want, out)
	}
	out, err = child(t, 1, "", run, fakeLong.Variable+"=1")
	if err != nil || !strings.Contains(out, "the long run ran") || strings.Contains(out, "NOT RUN") {
		t.Fatalf("asked for: err %v, want it run; output:\n%s", err, out)
	}
}
