//go:build !linux

package dbenv

import "syscall"

// dieWithParent does nothing where the kernel offers no parent-death signal:
// a server whose owner was killed outright keeps running until stopped.
func dieWithParent(attr *syscall.SysProcAttr) {}
