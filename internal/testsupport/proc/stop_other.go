//go:build !linux

package proc

import "time"

// WaitStopped waits a fixed 50ms: without /proc to watch, that is usually,
// not provably, enough for a stop to land.
func WaitStopped(pid int, timeout time.Duration) error {
	time.Sleep(min(50*time.Millisecond, timeout))
	return nil
}
