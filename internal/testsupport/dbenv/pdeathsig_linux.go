package dbenv

import "syscall"

// dieWithParent has the kernel send the server SIGQUIT (immediate shutdown)
// when the process that started it dies.
func dieWithParent(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGQUIT }
