//go:build unix && !linux

package main

import "syscall"

// procAttr runs the command in its own process group, so that a lost lease
// can stop everything it started. The terminal is not handed to it here
// (foreground is ignored): that is done on Linux only.
func procAttr(foreground bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

func stdinTerminal() bool       { return false }
func takeForeground() bool      { return false }
func aloneInGroup() bool        { return false }
func giveTerminal(from, to int) {}
func foregroundGroup() int      { return -1 }
func restoreTerminal(pgrp int)  {}

// groupHasMembers reports whether process group pgid has any member,
// zombies included.
func groupHasMembers(pgid int) bool { return groupRunning(pgid) }

// groupRunning reports whether process group pgid has a member (zombies
// included: there is no portable way to tell them apart).
func groupRunning(pgid int) bool {
	err := syscall.Kill(-pgid, 0)
	return err == nil || err == syscall.EPERM
}

func suspendSelf() bool { return false }

// catchStops: job control is passed on to the command on Linux only.
const catchStops = false
