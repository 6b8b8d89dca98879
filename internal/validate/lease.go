package validate

import "time"

// The bounds of pglease's arguments, which pglease enforces (its docs give
// the values) and the pgfence CLI checks its flags against before it
// connects.
const (
	// MinTTL is the shortest lease: below it a single round trip outlives
	// the lease.
	MinTTL = 10 * time.Millisecond
	// MaxTTL is the longest lease, minimum hold and period. A longer lease
	// would turn a crashed holder into an outage of over a day; renew a
	// shorter one instead.
	MaxTTL = 24 * time.Hour
	// MaxPermits is the largest number of permits of a semaphore.
	MaxPermits = 10000
	// MaxSetKeys is the largest number of keys in one key set.
	MaxSetKeys = 64
)
