package sqltmpl_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pgfence/pgfence/internal/sqltmpl"
)

// Parse and Expand never panic, and what Parse refuses it refuses as
// ErrTemplate. Plain keeps every byte of a statement without markers.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{stmt, "$", "E'", "e'\\", "$a", "$$", "/*", "/* TEMPLATE: col */", "'", `"`, "--", "x$y$ $y$"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		tmpl, err := sqltmpl.Parse(sql)
		if err != nil {
			if !errors.Is(err, sqltmpl.ErrTemplate) {
				t.Fatalf("Parse(%q) = %v, not ErrTemplate", sql, err)
			}
			return
		}
		if !strings.Contains(sql, "TEMPLATE") && !strings.HasPrefix(sql, "-- name: ") && tmpl.Plain() != strings.TrimSpace(sql) {
			t.Fatalf("Plain(%q) = %q", sql, tmpl.Plain())
		}
		if _, err := tmpl.Expand(names("q")); err != nil && !errors.Is(err, sqltmpl.ErrTemplate) {
			t.Fatalf("Expand: %v", err)
		}
	})
}
