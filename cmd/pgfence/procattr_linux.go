package main

import (
	"bytes"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// procAttr runs the command in its own process group (so that a lost lease
// can stop everything it started) and kills it if pgfence itself dies (its
// lease would then run out with nobody watching). With foreground, the
// group is made the foreground group of the terminal on stdin (fd 0), as a
// shell does for a job, so that the command can read it and the terminal's
// signals (Ctrl-C, Ctrl-Z) reach the command, not pgfence.
func procAttr(foreground bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Foreground: foreground, Ctty: 0}
}

// stdinTerminal reports whether stdin is a terminal.
func stdinTerminal() bool {
	var t syscall.Termios
	_, _, e := syscall.Syscall(syscall.SYS_IOCTL, 0, syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return e == 0
}

// foregroundGroup is the foreground process group of the terminal on
// stdin, or -1.
func foregroundGroup() int {
	var pgrp int32
	_, _, e := syscall.Syscall(syscall.SYS_IOCTL, 0, syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&pgrp)))
	if e != 0 {
		return -1
	}
	return int(pgrp)
}

// takeForeground reports whether the command should get the terminal:
// stdin is a terminal, pgfence's process group is its foreground group, and
// pgfence is alone in its group but for a waiting shell (in a pipeline
// such as pgfence exec … | less, the other members need the terminal:
// today's behaviour is kept).
func takeForeground() bool {
	own := syscall.Getpgrp()
	return stdinTerminal() && foregroundGroup() == own && aloneInGroup()
}

// aloneInGroup reports whether no live process of pgfence's process group
// is other than pgfence and its ancestors. An ancestor there is a shell
// without job control waiting for pgfence (sh -c '…', script(1), a
// Makefile's shell): it does not read the terminal meanwhile. Any other
// member (a pipeline's, say) may.
func aloneInGroup() bool {
	own := syscall.Getpgrp()
	if p := lastOther.Load(); p != 0 && runningIn(strconv.FormatInt(p, 10), own) {
		return false
	}
	skip := map[int]bool{os.Getpid(): true}
	for _, pid := range ancestorsInGroup() {
		skip[pid] = true
	}
	p := groupMember(own, skip)
	lastOther.Store(int64(p))
	return p == 0
}

// lastOther is the member of pgfence's group that aloneInGroup found last
// besides pgfence and its ancestors (a pipeline's), or 0. It is checked
// first, so that watching the terminal during a long pipeline reads one
// /proc entry per tick rather than all of /proc.
var lastOther atomic.Int64

// ancestorsInGroup walks up from pgfence's parent while the processes are
// in pgfence's process group, nearest first.
func ancestorsInGroup() []int {
	own := syscall.Getpgrp()
	var out []int
	for pid := os.Getppid(); pid > 1; {
		_, ppid, pgrp, _, ok := procStat("/proc/" + strconv.Itoa(pid) + "/stat")
		if !ok || pgrp != own {
			break
		}
		out = append(out, pid)
		pid = ppid
	}
	return out
}

// giveTerminal makes to the foreground group of stdin's terminal if from
// is; pgfence ignores SIGTTOU meanwhile when it is in the background.
func giveTerminal(from, to int) {
	if foregroundGroup() != from {
		return
	}
	pgrp := int32(to)
	syscall.Syscall(syscall.SYS_IOCTL, 0, syscall.TIOCSPGRP, uintptr(unsafe.Pointer(&pgrp)))
}

// restoreTerminal makes pgrp the foreground group of stdin's terminal
// again if another group has it, ignoring SIGTTOU meanwhile (pgfence may be
// in a background group then).
func restoreTerminal(pgrp int) {
	if pgrp < 0 || foregroundGroup() == pgrp {
		return
	}
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	p := int32(pgrp)
	syscall.Syscall(syscall.SYS_IOCTL, 0, syscall.TIOCSPGRP, uintptr(unsafe.Pointer(&p)))
}

// groupRunning reports whether process group pgid has a member that is not
// a zombie (a process whose main thread has exited counts while another of
// its threads runs). kill(-pgid, 0) would count zombies too, and an orphaned member
// stays one for as long as PID 1 does not reap it (a container's init may
// never do so), so /proc is read instead.
func groupRunning(pgid int) bool { return groupMember(pgid, nil) != 0 }

// groupMember returns a running member of process group pgid that is not
// in skip (see groupRunning), or 0 if there is none.
func groupMember(pgid int, skip map[int]bool) int {
	d, err := os.Open("/proc")
	if err != nil {
		if groupHasMembers(pgid) {
			return pgid // cannot tell which: the leader stands for the group
		}
		return 0
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		if groupHasMembers(pgid) {
			return pgid
		}
		return 0
	}
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || skip[pid] {
			continue
		}
		if runningIn(name, pgid) {
			return pid
		}
	}
	return 0
}

// runningIn reports whether process pid (a /proc name) is in process group
// pgid and not a zombie (see groupRunning).
func runningIn(pid string, pgid int) bool {
	state, _, pgrp, _, ok := procStat("/proc/" + pid + "/stat")
	if !ok || pgrp != pgid { // gone meanwhile, or another group's
		return false
	}
	return (state != "Z" && state != "X") || threadRunning(pid)
}

// threadRunning reports whether process pid (a zombie by its /proc/PID/stat:
// its main thread has exited) still has a thread that is not: a process
// whose main thread called pthread_exit runs on in its other threads.
func threadRunning(pid string) bool {
	tasks, err := os.ReadDir("/proc/" + pid + "/task")
	if err != nil {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/" + pid + "/task/" + task.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		if f := strings.Fields(string(b[i+1:])); len(f) > 0 && f[0] != "Z" && f[0] != "X" {
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

// catchStops: pgfence catches SIGTSTP and SIGCONT to pass job control on
// to the command's group (see job.suspend and job.continued).
const catchStops = true

// suspendSelf stops pgfence as a terminal's Ctrl-Z would, and reports
// whether it did; it returns once pgfence has been continued. Nothing is
// done if pgfence's process group is orphaned: the kernel discards a
// terminal stop there, as nobody would continue it. Ancestors in pgfence's
// group (a shell without job control waiting for it) get SIGTSTP, as
// Ctrl-Z sends it to the whole foreground group: a non-interactive shell
// stops, so that the interactive shell above sees its job stopped, and an
// interactive one (pgfence run in its own group, as in $(…)) ignores it.
// pgfence itself, which catches SIGTSTP, takes SIGSTOP, sent to the calling
// thread, which stops before it returns from tgkill (one sent to the
// process could be taken by another thread while this one went on).
func suspendSelf() bool {
	if groupOrphaned() {
		return false
	}
	for _, pid := range ancestorsInGroup() {
		syscall.Kill(pid, syscall.SIGTSTP)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
	return true
}

// groupOrphaned reports whether pgfence's process group is orphaned: no
// member has a parent in another group of the same session.
func groupOrphaned() bool {
	own := syscall.Getpgrp()
	sid, _, e := syscall.RawSyscall(syscall.SYS_GETSID, 0, 0, 0)
	if e != 0 {
		return true
	}
	names, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return true
	}
	for _, name := range names {
		_, ppid, pgrp, _, ok := procStat(name)
		if !ok || pgrp != own {
			continue
		}
		_, _, ppgrp, psid, ok := procStat("/proc/" + strconv.Itoa(ppid) + "/stat")
		if ok && ppgrp != own && psid == int(sid) {
			return false
		}
	}
	return true
}

// procStat reads state, ppid, pgrp and session from a /proc/PID/stat file.
func procStat(name string) (state string, ppid, pgrp, sid int, ok bool) {
	b, err := os.ReadFile(name)
	if err != nil {
		return "", 0, 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", 0, 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 4 {
		return "", 0, 0, 0, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	sid, err3 := strconv.Atoi(f[3])
	return f[0], ppid, pgrp, sid, err1 == nil && err2 == nil && err3 == nil
}
