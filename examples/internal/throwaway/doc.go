// Package throwaway is the demo's fallback server (a story.Fallback): a
// PostgreSQL started the way the tests start one (package dbenv: from the
// local server binaries, else in a container when a Docker engine answers),
// and stopped and removed on exit. It is internal because it builds on the
// tests' support code; an example that does not register it needs only a
// server it can reach.
package throwaway
