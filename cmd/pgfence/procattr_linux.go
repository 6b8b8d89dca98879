package main

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// procAttr runs the command in its own process group (so that a lost lease
// can stop everything it started) and kills it if pgfence itself dies (its
// lease would then run out with nobody watching).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// groupRunning reports whether process group pgid has a member that is not
// a zombie. kill(-pgid, 0) would count zombies too, and an orphaned member
// stays one for as long as PID 1 does not reap it (a container's init may
// never do so), so /proc is read instead.
func groupRunning(pgid int) bool {
	d, err := os.Open("/proc")
	if err != nil {
		return groupHasMembers(pgid)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return groupHasMembers(pgid)
	}
	for _, name := range names {
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, err := strconv.Atoi(f[2]); err == nil && g == pgid {
			return true
		}
	}
	return false
}

// groupHasMembers reports whether process group pgid has any member,
// zombies included.
func groupHasMembers(pgid int) bool {
	err := syscall.Kill(-pgid, 0)
	return err == nil || err == syscall.EPERM
}
