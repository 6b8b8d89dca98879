package proc

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// WaitStopped waits until every thread of pid is stopped by a signal, or
// exited.
func WaitStopped(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		stopped, err := allStopped(pid)
		if err != nil {
			return err
		}
		if stopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("proc: process %d did not stop within %v", pid, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}

func allStopped(pid int) (bool, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return false, fmt.Errorf("proc: no threads of %d in /proc: %v", pid, err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile(task)
		if err != nil {
			continue // the thread ended
		}
		// The state follows the parenthesised command name.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return false, fmt.Errorf("proc: unreadable %s: %q", task, b)
		}
		if st := b[i+2]; st != 'T' && st != 't' && st != 'Z' && st != 'X' {
			return false, nil
		}
	}
	return true, nil
}
