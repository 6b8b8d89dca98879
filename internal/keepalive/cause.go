package keepalive

import "strconv"

// Cause is why a lease was lost. The zero value, NotLost, is a lease that
// ended without loss (released).
type Cause uint8

const (
	NotLost Cause = iota
	// Expired: the database found the lease expired, and nobody else
	// holds the key.
	Expired
	// TakenOver: another owner holds the key (or the job) now.
	TakenOver
	// LocalDeadline: the local deadline passed without a successful
	// renewal.
	LocalDeadline
	// ReleaseFailed: a release was begun but did not succeed before the
	// local deadline.
	ReleaseFailed
	// Gone: a renewal found no lease under this fence, and which way it
	// was lost (Expired or TakenOver) is not known.
	Gone
	// NumCauses bounds the causes, for arrays indexed by Cause.
	NumCauses
)

var names = [NumCauses]string{"not_lost", "expired", "taken_over", "local_deadline", "release_failed", "unknown"}

// String is the cause's name in metrics (attribute cause).
func (c Cause) String() string {
	if c < NumCauses {
		return names[c]
	}
	return "Cause(" + strconv.Itoa(int(c)) + ")"
}

// Reason is the cause in words, for error texts.
func (c Cause) Reason() string {
	switch c {
	case Expired:
		return "it had expired"
	case TakenOver:
		return "another owner holds it now"
	case LocalDeadline:
		return "local deadline passed without a successful renewal"
	case ReleaseFailed:
		return "local deadline passed while it was being released"
	case Gone:
		return "renewal found it expired or held by another owner"
	}
	return c.String()
}
