package main

import "syscall"

// procAttr runs the command in its own process group (so that a lost lease
// can stop everything it started) and kills it if pgfence itself dies (its
// lease would then run out with nobody watching).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
