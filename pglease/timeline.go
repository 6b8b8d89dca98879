package pglease

import (
	"context"
	"fmt"

	"github.com/pgfence/pgfence"
)

// WithTimelineMark makes the client check every grant against mark, shared
// with other clients or with the fences a process passes to package
// pgguard, instead of a mark of its own. A client refuses a grant whose
// fence's WAL timeline is below the highest it has seen (see
// pgfence.TimelineMark): the fence could be below fences already handed
// out, by the new primary, to a resource that keeps no fenced row.
//
// Such a grant is given back and refused with an error satisfying
// errors.Is(err, pgfence.ErrStaleTimeline), wrapped with the key, whose
// text names both timelines: the server that granted it is a stale primary, or
// the cluster was rewound to an older timeline by a failover that was
// undone. Acquire retries it as it retries a dropped connection. Default: a
// mark of the client's own.
func WithTimelineMark(mark *pgfence.TimelineMark) Option {
	return func(c *config) error {
		if mark == nil {
			return invalid("nil timeline mark")
		}
		c.timelines = mark
		return nil
	}
}

// checkTimeline refuses a grant of key with fence from a timeline below the
// client's mark. The grant is given back in the background, within the
// client's resolution bound: the caller returns at once.
func (c *Client) checkTimeline(key, token string, fence int64, row leaseRow) error {
	err := c.cfg.timelines.Check(fence)
	if err == nil {
		return nil
	}
	c.cfg.logger.Warn("pglease: refused a grant from an older WAL timeline (stale primary, or a failover undone)",
		"key", key, "fence", fence, "err", err)
	c.inBackground(func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.resolveWait)
		defer cancel()
		c.abandonRow(ctx, key, token, row)
	})
	return fmt.Errorf("pglease: acquiring %q: %w", key, err)
}
