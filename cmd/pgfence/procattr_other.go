//go:build unix && !linux

package main

import "syscall"

// procAttr runs the command in its own process group, so that a lost lease
// can stop everything it started.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
