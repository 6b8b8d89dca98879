package validate

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// Key accepts exactly the keys the lock_leases table can hold: non-empty,
// at most MaxKeyBytes bytes, valid UTF-8, no NUL. Owner labels are
// checked by the same rules.
func FuzzKey(f *testing.F) {
	for _, s := range []string{"invoice:inv_72", "", "nul\x00", "bad\xff", strings.Repeat("é", 256), strings.Repeat("k", 513)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		want := key != "" && len(key) <= MaxKeyBytes && utf8.ValidString(key) && !strings.Contains(key, "\x00")
		if err := Key(key); (err == nil) != want {
			t.Fatalf("Key(%q) = %v, want accepted=%v", key, err, want)
		}
	})
}

// Identifier refuses every name that could end a quoted identifier, start
// a comment or confuse a reader, and whatever it accepts, quoting makes a
// single identifier that reads back as the name.
func FuzzIdentifier(f *testing.F) {
	for _, s := range []string{"last_fence", "My Emails", "Ünïcode", `a"b`, "a;b", "a--b", "a/*b", "tab\tname", " x", "nul\x00", "\xff", `jobs"; DROP TABLE x; --`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		quoted := pgx.Identifier{name}.Sanitize()
		if back := unquote(t, quoted); back != strings.ReplaceAll(name, "\x00", "") {
			t.Fatalf("Sanitize(%q) = %s reads back as %q", name, quoted, back)
		}
		if Identifier("table", name) != nil {
			return
		}
		if name == "" || len(name) > MaxIdentBytes || !utf8.ValidString(name) || strings.TrimSpace(name) != name {
			t.Fatalf("accepted %q", name)
		}
		for _, bad := range []string{`"`, "'", "`", ";", `\`, "--", "/*", "*/"} {
			if strings.Contains(name, bad) {
				t.Fatalf("accepted %q, which holds %q", name, bad)
			}
		}
		for _, r := range name {
			if r == 0 || unicode.IsControl(r) || (unicode.IsSpace(r) && r != ' ') {
				t.Fatalf("accepted %q, which holds %q", name, r)
			}
		}
		if quoted != `"`+name+`"` {
			t.Fatalf("accepted %q quotes as %s, not as itself in quotes", name, quoted)
		}
	})
}

// unquote reads a double-quoted SQL identifier: one pair of outer quotes,
// inner quotes doubled.
func unquote(t *testing.T, q string) string {
	if len(q) < 2 || q[0] != '"' || q[len(q)-1] != '"' {
		t.Fatalf("%s is not a quoted identifier", q)
	}
	inner := q[1 : len(q)-1]
	if strings.Contains(strings.ReplaceAll(inner, `""`, ""), `"`) {
		t.Fatalf("%s has a lone quote inside: it ends early", q)
	}
	return strings.ReplaceAll(inner, `""`, `"`)
}
