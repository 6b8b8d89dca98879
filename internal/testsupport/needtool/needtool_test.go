package needtool

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

var fake = Tool{"a program no machine has", "PGFENCE_REQUIRE_NEEDTOOL_FAKE", "nothing to install"}

// TestHelperMissing is run by TestMissing in a child process.
func TestHelperMissing(t *testing.T) {
	if os.Getenv("NEEDTOOL_CHILD") == "" {
		t.Skip("run by TestMissing")
	}
	fake.LookPath(t, "pgfence-no-such-program")
	t.Fatal("LookPath of a missing program returned")
}

// A missing program skips the test with the reason and how to get it,
// and announces it once per go test run; with the tool's variable set, it
// fails the test instead.
func TestMissing(t *testing.T) {
	run := func(env ...string) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperMissing$", "-test.v")
		cmd.Env = append(os.Environ(), append([]string{"NEEDTOOL_CHILD=1", "TMPDIR=" + t.TempDir()}, env...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run()
	if err != nil || !strings.Contains(out, "--- SKIP: TestHelperMissing") || !strings.Contains(out, "nothing to install") {
		t.Fatalf("not required: err %v, output:\n%s", err, out)
	}
	if n := strings.Count(out, "pgfence tests: NOT RUN without a program no machine has"); n != 1 {
		t.Errorf("the notice came %d times, want once:\n%s", n, out)
	}
	out, err = run(fake.Variable + "=1")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !strings.Contains(out, "--- FAIL: TestHelperMissing") {
		t.Fatalf("required: err %v, output:\n%s", err, out)
	}
}
