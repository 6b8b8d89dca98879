//go:build unix && !linux

package main

import "syscall"

// procAttr puts the worker in its own process group (a terminal's Ctrl-C
// reaches the demo, which stops the worker itself). There is no
// parent-death signal here: a demo killed outright leaves the worker to
// finish or be stopped by hand.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
