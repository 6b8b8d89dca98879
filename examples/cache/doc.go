// Cache refresh: five nodes serve an expensive report from a shared cache.
// When the entry is missing or stale, one node rebuilds it under the lease
// "cache:report:daily"; the others either wait for it (nothing to serve yet:
// Acquire, which backs off with jitter and has a maximum wait) or serve the
// stale copy at once (TryAcquire lost: someone is rebuilding). A duplicate
// rebuild would only cost CPU, so this is an efficiency lock: no fence needed.
//
//	go run ./examples/cache
package main
