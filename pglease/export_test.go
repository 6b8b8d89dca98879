package pglease

import (
	"context"
	"time"
)

// SetRenewHook replaces the renew statement of c's leases, for tests that
// stall or fail renewals.
func SetRenewHook(c *Client, h func(ctx context.Context, l *Lease) (time.Time, error)) {
	c.renewHook = h
}
