package validate

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxIdentBytes is PostgreSQL's identifier limit (NAMEDATALEN - 1); the
// server would silently truncate a longer name.
const MaxIdentBytes = 63

// Identifier checks a table, schema or column name that a generic helper
// will quote (pgx.Identifier.Sanitize) and put into SQL. Quoting alone makes
// any name safe; this check is so that an injection attempt or a confused
// caller gets a clear error instead of a strange table name. It refuses
// names that are empty, longer than MaxIdentBytes, not UTF-8, or that hold
// quotes, semicolons, backslashes, comment markers, "$$" (it would end the
// dollar-quoted function bodies a schema name is written into by the
// migrations), control characters, whitespace other than a plain inner
// space, or leading or trailing spaces.
// A plain inner space is allowed: "My Emails" is a legitimate quoted name.
// what names the parameter in the message.
func Identifier(what, s string) error {
	const refused = "identifiers with quotes, semicolons, backslashes, comment markers, $$, control characters or whitespace other than an inner space are refused"
	switch {
	case s == "":
		return fmt.Errorf("%s is empty", what)
	case len(s) > MaxIdentBytes:
		return fmt.Errorf("%s %q is %d bytes; PostgreSQL identifiers are at most %d", what, s, len(s), MaxIdentBytes)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s %q is not valid UTF-8", what, s)
	case strings.TrimSpace(s) != s:
		return fmt.Errorf("%s %q has leading or trailing space; %s", what, s, refused)
	}
	for _, r := range s {
		if r == '"' || r == '\'' || r == '`' || r == ';' || r == '\\' || r == 0 || unicode.IsControl(r) || (unicode.IsSpace(r) && r != ' ') {
			return fmt.Errorf("%s %q contains %q; %s", what, s, r, refused)
		}
	}
	for _, marker := range []string{"--", "/*", "*/", "$$"} {
		if strings.Contains(s, marker) {
			return fmt.Errorf("%s %q contains %q; %s", what, s, marker, refused)
		}
	}
	return nil
}
