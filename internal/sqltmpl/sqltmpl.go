package sqltmpl

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ErrTemplate wraps every error of Parse and Expand: a mistake in a
// statement's markers or in the names given for them.
var ErrTemplate = errors.New("sqltmpl")

func errorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrTemplate}, args...)...)
}

type kind uint8

const (
	text   kind = iota // SQL kept as written
	table              // a table name
	column             // a column name
	schema             // an object name to prefix with the schema
	ifCol              // start of a section kept when its column exists
	end                // end of a section
)

type part struct {
	kind kind
	s    string // the text, or the name the marker marks
}

// Template is a parsed statement. It is immutable and safe for concurrent
// use.
type Template struct {
	name  string // from the "-- name:" line, for errors; "" when none
	parts []part
}

// Names are what Expand puts in place of the marked names.
type Names struct {
	// Schema prefixes each schema-marked name, and each table-marked name
	// that Tables does not map, as "schema".name; "" leaves them as written
	// (found through the search_path).
	Schema string
	// Tables maps a marked table name to the table to use instead (with its
	// own schema, if any; Schema does not apply to it).
	Tables map[string]pgx.Identifier
	// Columns maps every marked column name to the column to use, "" when the
	// table has none (then TEMPLATE_IF sections on it are dropped).
	Columns map[string]string
}

// Parse reads a statement's markers (see the package documentation). A
// leading "-- name: X :kind" line, as sqlc keeps at the top of each
// generated constant, is dropped.
func Parse(sql string) (*Template, error) {
	t := &Template{}
	if rest, ok := strings.CutPrefix(sql, "-- name: "); ok {
		line, after, _ := strings.Cut(rest, "\n")
		t.name, _, _ = strings.Cut(line, " ")
		sql = after
	}
	sql = strings.TrimSpace(sql) // sqlc leaves an empty line where the doc comment was
	if err := t.parse(sql); err != nil {
		if t.name != "" {
			return nil, fmt.Errorf("%w (statement %s)", err, t.name)
		}
		return nil, err
	}
	return t, nil
}

func (t *Template) parse(sql string) error {
	start, open := 0, false
	for i := 0; i < len(sql); {
		next, m, err := scan(sql, i)
		if err != nil {
			return err
		}
		if m == nil {
			i = next
			continue
		}
		switch {
		case m.kind == ifCol && open:
			return errorf("TEMPLATE_IF inside a section at byte %d", i)
		case m.kind == end && !open:
			return errorf("TEMPLATE_END without TEMPLATE_IF at byte %d", i)
		case m.kind == ifCol || m.kind == end:
			open = m.kind == ifCol
		}
		t.add(part{kind: text, s: sql[start:i]})
		t.parts = append(t.parts, *m)
		i, start = next, next
	}
	if open {
		return errorf("TEMPLATE_IF without TEMPLATE_END")
	}
	t.add(part{kind: text, s: sql[start:]})
	return nil
}

// scan reads what starts at byte i: a marker (with the name it marks), or
// else a literal, quoted name or comment skipped whole, or one byte. next is
// where the rest starts.
func scan(sql string, i int) (next int, m *part, err error) {
	if next, err = skipQuoted(sql, i); err != nil || next > i {
		return next, nil, err
	}
	if !strings.HasPrefix(sql[i:], "/*") {
		return i + 1, nil, nil
	}
	closeAt := strings.Index(sql[i+2:], "*/")
	if closeAt < 0 {
		return 0, nil, errorf("unterminated comment at byte %d", i)
	}
	body := sql[i+2 : i+2+closeAt]
	next = i + 2 + closeAt + 2
	if strings.Contains(body, "/*") {
		return 0, nil, errorf("nested comment at byte %d", i)
	}
	p, ok, err := marker(strings.TrimSpace(body))
	if err != nil {
		return 0, nil, errorf("%v at byte %d", err, i)
	}
	if !ok {
		return next, nil, nil
	}
	if p.kind == table || p.kind == column || p.kind == schema {
		n := identLen(sql[next:])
		if n == 0 {
			return 0, nil, errorf("TEMPLATE: %s at byte %d is not followed at once by a lower-case name", kindWord[p.kind], i)
		}
		p.s, next = sql[next:next+n], next+n
	}
	return next, &p, nil
}

func (t *Template) add(p part) {
	if p.s != "" {
		t.parts = append(t.parts, p)
	}
}

var kindWord = map[kind]string{table: "table", column: "col", schema: "schema"}

// marker reads a comment's body: ok is false for an ordinary comment.
func marker(body string) (p part, ok bool, err error) {
	switch {
	case body == "TEMPLATE_END":
		return part{kind: end}, true, nil
	case strings.HasPrefix(body, "TEMPLATE_IF:"):
		name := strings.TrimSpace(strings.TrimPrefix(body, "TEMPLATE_IF:"))
		if name == "" || identLen(name) != len(name) {
			return p, false, fmt.Errorf("TEMPLATE_IF needs one lower-case column name, got %q", name)
		}
		return part{kind: ifCol, s: name}, true, nil
	case strings.HasPrefix(body, "TEMPLATE: "):
		for k, w := range kindWord {
			if body == "TEMPLATE: "+w {
				return part{kind: k}, true, nil
			}
		}
	case !strings.HasPrefix(body, "TEMPLATE"):
		return p, false, nil
	}
	return p, false, fmt.Errorf("unknown marker /* %s */", body)
}

// identLen is the length of the plain lower-case identifier s starts with.
func identLen(s string) int { return nameLen(s, true) }

// nameLen is identLen, without the $ an identifier may hold (after its
// first character) when dollar is false: the tag of a dollar quote.
func nameLen(s string, dollar bool) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || c >= 'a' && c <= 'z' || i > 0 && (c >= '0' && c <= '9' || c == '$' && dollar) {
			continue
		}
		return i
	}
	return len(s)
}

// skipQuoted returns the end of the string literal, quoted identifier, line
// comment or dollar-quoted string at i, or i when none starts there, so that
// a marker-like text inside one is never read as a marker.
func skipQuoted(sql string, i int) (int, error) {
	var closer string
	switch {
	case sql[i] == '\'' && escapeString(sql, i):
		for j := i + 1; j < len(sql); j++ {
			switch sql[j] {
			case '\\':
				j++
			case '\'':
				return j + 1, nil // a doubled quote inside reads as close + open
			}
		}
		return 0, errorf("unterminated E' at byte %d", i)
	case sql[i] == '\'' || sql[i] == '"':
		closer = sql[i : i+1] // a doubled quote inside reads as close + open
	case strings.HasPrefix(sql[i:], "--"):
		if nl := strings.IndexByte(sql[i:], '\n'); nl >= 0 {
			return i + nl + 1, nil
		}
		return len(sql), nil
	case sql[i] == '$':
		n := nameLen(sql[i+1:], false)
		if i+1+n >= len(sql) || sql[i+1+n] != '$' || i > 0 && identChar(sql[i-1]) {
			return i, nil // a parameter ($1) or part of a name
		}
		closer = sql[i : i+n+2]
	default:
		return i, nil
	}
	j := strings.Index(sql[i+len(closer):], closer)
	if j < 0 {
		return 0, errorf("unterminated %s at byte %d", closer, i)
	}
	return i + len(closer) + j + len(closer), nil
}

// escapeString reports whether the quote at i opens an escape string
// (E'...'), in which a backslash escapes the next character.
func escapeString(sql string, i int) bool {
	return i > 0 && (sql[i-1] == 'E' || sql[i-1] == 'e') && (i == 1 || !identChar(sql[i-2]))
}

// identChar reports whether c may continue an unquoted identifier.
func identChar(c byte) bool {
	return c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

// Expand returns the statement for names: every marker removed, every
// marked name replaced, every TEMPLATE_IF section kept or dropped.
func (t *Template) Expand(n Names) (string, error) {
	var b strings.Builder
	drop := false
	for _, p := range t.parts {
		switch {
		case p.kind == end:
			drop = false
		case drop:
		case p.kind == ifCol:
			c, err := n.column(p.s)
			if err != nil {
				return "", t.wrap(err)
			}
			drop = c == ""
		case p.kind == text:
			b.WriteString(p.s)
		case p.kind == column:
			c, err := n.column(p.s)
			if err == nil && c == "" {
				err = errorf("the table has no %s column, which this statement needs", p.s)
			}
			if err != nil {
				return "", t.wrap(err)
			}
			b.WriteString(pgx.Identifier{c}.Sanitize())
		case p.kind == table:
			if id, ok := n.Tables[p.s]; ok {
				b.WriteString(id.Sanitize())
				continue
			}
			fallthrough
		case p.kind == schema:
			if n.Schema != "" {
				b.WriteString(pgx.Identifier{n.Schema}.Sanitize() + ".")
			}
			b.WriteString(p.s)
		}
	}
	return b.String(), nil
}

func (n Names) column(name string) (string, error) {
	c, ok := n.Columns[name]
	if !ok {
		return "", errorf("no name given for column %s", name)
	}
	return c, nil
}

func (t *Template) wrap(err error) error {
	if t.name == "" {
		return err
	}
	return fmt.Errorf("%w (statement %s)", err, t.name)
}

// Plain is the statement as sqlc checked it: every marker removed, every
// name as written, every section kept.
func (t *Template) Plain() string {
	var b strings.Builder
	for _, p := range t.parts {
		if p.kind != ifCol && p.kind != end {
			b.WriteString(p.s)
		}
	}
	return b.String()
}

// Name is the statement's name from its "-- name:" line ("" when none).
func (t *Template) Name() string { return t.name }
