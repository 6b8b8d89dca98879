//go:build !linux

package pglease_test

// semWorkerEnv names the worker processes of the Linux-only process tests.
const semWorkerEnv = "PGFENCE_SEM_WORKER"

// semWorkerMain: no worker processes outside Linux.
func semWorkerMain() int { return 1 }
