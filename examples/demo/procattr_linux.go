package main

import "syscall"

// procAttr puts the worker in its own process group (a terminal's Ctrl-C
// reaches the demo, which stops the worker itself) and kills it if the demo
// dies, frozen or not.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
