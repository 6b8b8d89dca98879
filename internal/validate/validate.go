package validate

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxKeyBytes is the longest lock key, in bytes of UTF-8.
const MaxKeyBytes = 512

// MaxOwnerBytes is the longest owner label (pglease.WithOwner,
// claim.WithOwner), in bytes of UTF-8.
const MaxOwnerBytes = 256

// Key checks a lock key: non-empty, at most MaxKeyBytes bytes, valid UTF-8,
// no NUL byte (PostgreSQL text cannot hold one).
func Key(key string) error { return Text("key", key, MaxKeyBytes) }

// Owner checks an owner label by the rule of keys: non-empty, at most
// MaxOwnerBytes bytes, valid UTF-8, no NUL byte. A label the database cannot
// store would otherwise make every acquire or claim fail (SQLSTATE 22021).
func Owner(label string) error { return Text("owner label", label, MaxOwnerBytes) }

// Text checks a string that is stored in a text column: non-empty, at most
// max bytes, valid UTF-8 and without a NUL byte, which PostgreSQL text cannot
// hold. what names it in the message.
func Text(what, s string, max int) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty", what)
	case len(s) > max:
		return fmt.Errorf("%s is %d bytes; the limit is %d", what, len(s), max)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s %q is not valid UTF-8", what, s)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%s %q contains a NUL byte", what, s)
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
