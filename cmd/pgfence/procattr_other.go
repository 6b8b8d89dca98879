//go:build unix && !linux

package main

import "syscall"

// procAttr runs the command in its own process group, so that a lost lease
// can stop everything it started.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// groupRunning reports whether process group pgid has a member (zombies
// included: there is no portable way to tell them apart).
func groupRunning(pgid int) bool {
	err := syscall.Kill(-pgid, 0)
	return err == nil || err == syscall.EPERM
}
