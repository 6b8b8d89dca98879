package pgfence

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/pgfence/pgfence/internal/validate"
)

// timelineShift is where a pgfence fence keeps the WAL timeline (see
// Timeline).
const timelineShift = 44

// Timeline is the PostgreSQL WAL timeline of the server that issued a
// pgfence fence, which the fence keeps in its high bits: fence = timeline<<44
// | sequence. A promoted standby runs on a higher timeline than the primary
// it replaced, so its fences are above every fence the old primary issued,
// even though the fence sequence itself is not replicated synchronously.
func Timeline(fence int64) int64 { return fence >> timelineShift }

// ErrStaleTimeline: a fence came from an older WAL timeline than a fence
// already seen. The server that issued it is not the current primary any
// more, or the current one was rewound to an older timeline (a failover
// undone): either way its fences can be below ones already handed out. The
// error's text names the fence, its timeline and the highest one seen.
var ErrStaleTimeline = errors.New("pgfence: fence from an older WAL timeline than one already seen")

// staleTimelineError is ErrStaleTimeline for one refused fence.
type staleTimelineError struct {
	fence    int64 // the refused fence
	timeline int64 // its timeline
	seen     int64 // the highest timeline seen before it
}

func (e *staleTimelineError) Error() string {
	return fmt.Sprintf("pgfence: fence %d is from WAL timeline %d, but a fence from timeline %d was already seen: "+
		"the server that issued it is a stale primary (a failover happened and it still accepts writes), "+
		"or a failover was undone and the cluster rewound to an older timeline", e.fence, e.timeline, e.seen)
}

func (e *staleTimelineError) Is(target error) bool { return target == ErrStaleTimeline }

// TimelineMark is a high-water mark of the WAL timelines of the fences a
// process has seen. Pass every fence through Check before acting on it: a
// fence from a lower timeline than the mark comes from a stale primary and
// is refused. It complements the fenced row (which refuses a fence below its
// own) for fences that reach something that keeps no row: a grant on a
// zombie primary can be above everything that row has seen yet, but never
// above the timeline of a fence the new primary has issued. The zero value
// is ready to use and safe for concurrent use. pglease clients keep one each
// (pglease.WithTimelineMark shares one).
type TimelineMark struct{ high atomic.Int64 }

// Check raises the mark to fence's timeline, or returns ErrStaleTimeline
// when that timeline is below the mark (the mark is then unchanged). Fences <= 0 are refused with ErrInvalidInput.
func (m *TimelineMark) Check(fence int64) error {
	if fence <= 0 {
		return validate.Invalid("pgfence", "fence %d must be positive", fence)
	}
	tl := Timeline(fence)
	for {
		seen := m.high.Load()
		if tl < seen {
			return &staleTimelineError{fence: fence, timeline: tl, seen: seen}
		}
		if tl == seen || m.high.CompareAndSwap(seen, tl) {
			return nil
		}
	}
}
