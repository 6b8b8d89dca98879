// Package proc freezes and resumes processes for the demo and the tests that
// replay a stalled worker (a stale holder).
//
// kill(SIGSTOP) returns before the process has stopped: the signal is only
// queued, and a thread on another core may run on for a moment. A caller
// that freezes a worker "between its check and its write" and then acts must
// first wait until every thread really is stopped, or the worker may slip its
// write in (or take a row lock) before the freeze lands. Stop does both.
package proc
