package dbenv

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// deadPID returns the PID of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.ProcessState.Pid()
}

// fakeCluster makes a cluster directory under parent with the given owner
// and server PIDs (0: no such file).
func fakeCluster(t *testing.T, parent, name string, owner, server int) string {
	t.Helper()
	dir := filepath.Join(parent, "pgfence-pg-"+name)
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(file string, pid int) {
		if pid == 0 {
			return
		}
		if err := os.WriteFile(file, []byte(strconv.Itoa(pid)+"\n/some/dir\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(dir, ownerFile), owner)
	write(filepath.Join(dir, "data", "postmaster.pid"), server)
	return dir
}

func TestSweepDeadKeepsLiveAndUnknown(t *testing.T) {
	parent := t.TempDir()
	dead := deadPID(t)
	deadDir := fakeCluster(t, parent, "dead", dead, dead)
	noServer := fakeCluster(t, parent, "noserver", dead, 0)
	live := fakeCluster(t, parent, "live", os.Getpid(), 0)
	serverRuns := fakeCluster(t, parent, "serverruns", dead, os.Getpid())
	unrecorded := fakeCluster(t, parent, "unrecorded", 0, 0)
	other := filepath.Join(parent, "not-ours")
	os.Mkdir(other, 0o755)

	removed := sweepDead(parent)
	slices.Sort(removed)
	if want := []string{deadDir, noServer}; !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	for _, dir := range []string{live, serverRuns, unrecorded, other} {
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("%s was removed: %v", filepath.Base(dir), err)
		}
	}
	for _, dir := range []string{deadDir, noServer} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s is still there (%v)", filepath.Base(dir), err)
		}
	}
}

// TestSweepAfterKill starts a real throwaway cluster in a child process,
// kills the child with SIGKILL (no cleanup runs), and checks that the
// directory is kept while the child lives and swept once it is dead.
func TestSweepAfterKill(t *testing.T) {
	if os.Getenv("PGFENCE_SWEEP_CHILD") == "1" {
		sweepChild()
		return
	}
	if _, err := findBinDir(); err != nil {
		t.Skipf("this test starts a cluster from local PostgreSQL binaries, and there are none: %v", err)
	}
	// PostgreSQL may run as another user (root drops to postgres): its
	// directory's parent must be traversable, which t.TempDir's is not.
	tmp, err := os.MkdirTemp("", "pgfence-sweep-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	os.Chmod(tmp, 0o755)

	cmd := exec.Command(os.Args[0], "-test.run=^TestSweepAfterKill$")
	cmd.Env = append(os.Environ(), "PGFENCE_SWEEP_CHILD=1", "TMPDIR="+tmp)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		t.Fatal("the child exited before starting its cluster")
	}
	dir := sc.Text()
	if got := sweepDead(tmp); len(got) != 0 {
		t.Fatalf("swept %v while its owner runs", got)
	}
	server, ok := readPID(filepath.Join(dir, "data", "postmaster.pid"))
	if !ok {
		t.Fatalf("no postmaster.pid in %s", dir)
	}

	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if runtime.GOOS != "linux" {
		// No parent-death signal here: the server outlives its owner, and
		// while it runs its directory must stay.
		if got := sweepDead(tmp); len(got) != 0 {
			t.Fatalf("swept %v while its server runs", got)
		}
		syscall.Kill(server, syscall.SIGQUIT)
	}
	for deadline := time.Now().Add(30 * time.Second); alive(server); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the server (pid %d) outlived its killed owner by 30s", server)
		}
	}
	if got := sweepDead(tmp); !slices.Equal(got, []string{dir}) {
		t.Fatalf("swept %v, want [%s]", got, dir)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s is still there (%v)", dir, err)
	}
}

// sweepChild starts a cluster, prints its directory and waits to be killed.
func sweepChild() {
	ctx := context.Background()
	c, err := NewCluster(5432)
	if err == nil {
		err = c.InitDB(ctx)
	}
	if err == nil {
		err = c.Start(ctx, os.Stderr)
	}
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	os.Stdout.WriteString(c.Dir + "\n")
	time.Sleep(time.Hour)
}
