package pglease

import "time"

// ListenerPID is the backend pid of c's wake-on-release listener, 0 while it
// is not listening (or c has none).
func ListenerPID(c *Client) uint32 {
	if c.wake == nil {
		return 0
	}
	return c.wake.l.PID()
}

// Listens counts the successful LISTENs of c's listener: the first one plus
// each reconnection.
func Listens(c *Client) int64 {
	if c.wake == nil {
		return 0
	}
	return c.wake.l.Listens()
}

// Wakeups counts the wake-ups c's listener handed to waiters.
func Wakeups(c *Client) int64 {
	if c.wake == nil {
		return 0
	}
	return c.wake.l.Wakeups()
}

// SetListenerRetry sets the bounds of the listener's reconnect backoff.
func SetListenerRetry(c *Client, min, max time.Duration) { c.wake.l.SetRetry(min, max) }

// SetListenerPing sets how long c's listener waits for a notification before
// it checks its connection.
func SetListenerPing(c *Client, d time.Duration) { c.wake.l.SetPing(d) }

// ListenerPooled reports whether c's listener found a transaction pooler
// in front of PostgreSQL and so never LISTENs.
func ListenerPooled(c *Client) bool { return c.wake != nil && c.wake.l.Pooled() }
