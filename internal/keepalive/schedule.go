package keepalive

import "time"

// MaxRetry caps the wait before a failed renewal is retried.
const MaxRetry = 250 * time.Millisecond

// Schedule is how a lease of one TTL is kept alive. The zero Margin and
// Every mean the defaults: TTL/10 and TTL/3. Callers check that both are
// shorter than the TTL before they use it.
type Schedule struct {
	TTL    time.Duration
	Margin time.Duration // how much before TTL the lease counts as lost; 0: TTL/10
	Every  time.Duration // renewal interval; 0: TTL/3
}

// SafetyMargin is the margin in effect: Margin, or TTL/10 when it is zero.
func (s Schedule) SafetyMargin() time.Duration {
	if s.Margin > 0 {
		return s.Margin
	}
	return s.TTL / 10
}

// Interval is how long after a successful renewal (or the acquisition) the
// next renewal is due.
func (s Schedule) Interval() time.Duration {
	if s.Every > 0 {
		return s.Every
	}
	return s.TTL / 3
}

// Retry is how long after a failed renewal it is tried again.
func (s Schedule) Retry() time.Duration { return min(s.Interval()/4, MaxRetry) }

// Next is when the next renewal is due after one that succeeded (ok) or
// failed.
func (s Schedule) Next(ok bool) time.Duration {
	if ok {
		return s.Interval()
	}
	return s.Retry()
}

// Deadline is the local deadline of a lease whose acquire or renew was sent
// at sent (read just before sending, so it carries the monotonic clock).
func (s Schedule) Deadline(sent time.Time) time.Time { return sent.Add(s.TTL - s.SafetyMargin()) }

// Extend is the local deadline after a successful renewal sent at sent, of a
// lease whose deadline was cur: the later of the two, so that a slow
// renewal's answer never moves it back.
func (s Schedule) Extend(cur, sent time.Time) time.Time {
	if d := s.Deadline(sent); d.After(cur) {
		return d
	}
	return cur
}
