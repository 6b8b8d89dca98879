package validate

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxKeyBytes is the longest lock key, in bytes of UTF-8.
const MaxKeyBytes = 512

// Key checks a lock key: non-empty, at most MaxKeyBytes bytes, valid UTF-8,
// no NUL byte (PostgreSQL text cannot hold one).
func Key(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("key is empty")
	case len(key) > MaxKeyBytes:
		return fmt.Errorf("key is %d bytes; the limit is %d", len(key), MaxKeyBytes)
	case !utf8.ValidString(key):
		return fmt.Errorf("key %q is not valid UTF-8", key)
	case strings.IndexByte(key, 0) >= 0:
		return fmt.Errorf("key %q contains a NUL byte", key)
	}
	return nil
}

// Duration checks that d lies in (0, max], naming it what in the message.
func Duration(what string, d, max time.Duration) error {
	switch {
	case d <= 0:
		return fmt.Errorf("%s must be positive, got %v", what, d)
	case max > 0 && d > max:
		return fmt.Errorf("%s %v is over the limit of %v", what, d, max)
	}
	return nil
}
