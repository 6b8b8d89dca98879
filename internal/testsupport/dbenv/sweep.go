package dbenv

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// clusterPattern names the temporary directories of throwaway clusters.
const clusterPattern = "pgfence-pg-*"

// ownerFile, in a cluster's directory, holds the PID of the process that
// created it. A test binary killed outright (SIGKILL, a CI timeout) never
// runs Remove; the next Open recognises its directory by this file and a
// PID that no longer runs.
const ownerFile = "owner.pid"

// recordOwner writes this process's PID into a new cluster's directory.
func recordOwner(dir string) error {
	return os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)
}

// sweepDead removes the cluster directories under parent that a dead
// process left behind, and returns the ones it removed. It never removes a
// directory whose owner still runs, whose server still runs, or that has no
// owner record (being created right now, or made by an older pgfence: that
// one is left for a person to remove). A PID reused by another process
// reads as alive, which errs on the side of keeping.
func sweepDead(parent string) (removed []string) {
	dirs, _ := filepath.Glob(filepath.Join(parent, clusterPattern))
	for _, dir := range dirs {
		owner, ok := readPID(filepath.Join(dir, ownerFile))
		if !ok || alive(owner) {
			continue
		}
		// postmaster.pid's first line is the server's PID. On Linux the
		// server died with its owner (parent-death signal); elsewhere it may
		// still run, and then its directory stays.
		if server, ok := readPID(filepath.Join(dir, "data", "postmaster.pid")); ok && alive(server) {
			continue
		}
		if err := os.RemoveAll(dir); err == nil {
			removed = append(removed, dir)
		}
	}
	return removed
}

// readPID reads the decimal PID on the first line of file.
func readPID(file string) (int, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	pid, err := strconv.Atoi(string(bytes.TrimSpace(line)))
	return pid, err == nil && pid > 0
}

// alive reports whether a process with this PID exists (signal 0 checks
// without sending anything; EPERM means it exists under another user).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// sweepTemp sweeps the temporary directory and says what it removed.
func sweepTemp(log io.Writer) {
	for _, dir := range sweepDead(os.TempDir()) {
		fmt.Fprintf(log, "pgfence: removed %s, left by a throwaway PostgreSQL whose owner process is gone\n", dir)
	}
}
