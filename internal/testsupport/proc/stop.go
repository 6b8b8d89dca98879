package proc

import (
	"fmt"
	"syscall"
	"time"
)

// Stop sends SIGSTOP to pid and waits, up to timeout, until the process
// really is stopped (WaitStopped).
func Stop(pid int, timeout time.Duration) error {
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("proc: SIGSTOP %d: %w", pid, err)
	}
	return WaitStopped(pid, timeout)
}
