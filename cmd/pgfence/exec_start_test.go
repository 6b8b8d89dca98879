package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// launcherScript is a launcher without job control of its own: it starts
// its arguments in a new process group, makes that group the terminal's
// foreground group (as os/exec's Foreground does), waits, and reports which
// group has the terminal afterwards.
const launcherScript = `use POSIX;
$SIG{TTOU} = "IGNORE";
my $pid = fork;
if ($pid == 0) { setpgid(0, 0); tcsetpgrp(0, $$); $SIG{TTOU} = "DEFAULT"; exec @ARGV; exit 127 }
setpgid($pid, $pid); tcsetpgrp(0, $pid);
waitpid($pid, 0);
printf "rc=%d child=%d tpgid=%d\n", $? >> 8, $pid, tcgetpgrp(0);`

// TestExecStartFailureGivesTerminalBack: when the command cannot be run
// after its group took the terminal (ENOEXEC: an executable text file
// without a shebang), pgfence takes the terminal back for its own group
// before exiting 126, not leaving it to the dead group of the command.
func TestExecStartFailureGivesTerminalBack(t *testing.T) {
	t.Parallel()
	prog := filepath.Join(t.TempDir(), "noshebang")
	if err := os.WriteFile(prog, []byte("\x01\x02 not a script\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd, _, out := onTerminal(t, nil, "perl", "-e", launcherScript, bin, "exec", "--database-url", pgtest.URL(),
		"--key", randomName("noexec:"), "--ttl", "3s", "--", prog)
	waitExit(t, cmd)
	m := regexp.MustCompile(`rc=(\d+) child=(\d+) tpgid=(-?\d+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no report from the launcher; output:\n%s", out)
	}
	if m[1] != "126" {
		t.Fatalf("pgfence exit %s, want 126; output:\n%s", m[1], out)
	}
	if m[3] != m[2] {
		t.Fatalf("after pgfence exited the terminal's foreground group is %s, want pgfence's own %s; output:\n%s", m[3], m[2], out)
	}
}
