//go:build !linux

package proc

import (
	"fmt"
	"syscall"
	"time"
)

// Stop sends SIGSTOP to pid. Without /proc to watch, it then waits a fixed
// 50ms, which is usually, not provably, enough for the stop to land.
func Stop(pid int, timeout time.Duration) error {
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("proc: SIGSTOP %d: %w", pid, err)
	}
	return WaitStopped(pid, timeout)
}

// WaitStopped waits a fixed 50ms (see Stop).
func WaitStopped(pid int, timeout time.Duration) error {
	time.Sleep(min(50*time.Millisecond, timeout))
	return nil
}
