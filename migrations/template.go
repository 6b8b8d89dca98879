package migrations

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/jackc/pgx/v5"
)

// schemaMarker marks, in a migration file, a name of pgfence's that is to be
// qualified with the schema the migration runs in. Unlike package sqltmpl,
// which leaves literals and function bodies alone, it counts everywhere in
// the file: its purpose is to qualify names inside function bodies (and in
// the regclass literals of nextval('…')), which PostgreSQL otherwise
// resolves through the search_path of whichever session calls the function.
const schemaMarker = "/* TEMPLATE: schema */"

// expandSchema replaces every schema marker in sql with `"schema".`, or
// drops it when schema is "" (the names are then found through the
// search_path, as before migration 000007). It is strict so that a mistake
// in a file fails the tests: a marker must be written exactly as
// schemaMarker and be followed at once by a lower-case name; any other text
// holding "TEMPLATE" in a comment is an error.
func expandSchema(sql, schema string) (string, error) {
	prefix := ""
	if schema != "" {
		prefix = pgx.Identifier{schema}.Sanitize() + "."
	}
	var b strings.Builder
	rest := sql
	for {
		i := strings.Index(rest, "/*")
		if i < 0 {
			b.WriteString(rest)
			return b.String(), nil
		}
		b.WriteString(rest[:i])
		rest = rest[i:]
		if !strings.HasPrefix(rest, schemaMarker) {
			end := strings.Index(rest, "*/")
			if end < 0 {
				return "", fmt.Errorf("unterminated comment at %q", head(rest))
			}
			if strings.Contains(rest[:end], "TEMPLATE") {
				return "", fmt.Errorf("unknown marker %q (only %s is known)", head(rest[:end+2]), schemaMarker)
			}
			b.WriteString(rest[:end+2])
			rest = rest[end+2:]
			continue
		}
		rest = rest[len(schemaMarker):]
		if nameLen(rest) == 0 {
			return "", fmt.Errorf("%s is not followed at once by a lower-case name: %q", schemaMarker, head(rest))
		}
		b.WriteString(prefix)
	}
}

func head(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// nameLen is the length of the plain lower-case identifier s starts with.
func nameLen(s string) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return i
	}
	return len(s)
}

// schemaFS is the embedded files with every .sql file's schema markers
// expanded for schema (see expandSchema); golang-migrate reads it.
type schemaFS struct {
	base   fs.FS
	schema string
}

func (f schemaFS) Open(name string) (fs.File, error) {
	file, err := f.base.Open(name)
	if err != nil || !strings.HasSuffix(name, ".sql") {
		return file, err
	}
	defer file.Close()
	info, err := file.Stat()
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(file)
	if err != nil {
		return nil, err
	}
	sql, err := expandSchema(string(raw), f.schema)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("pgfence migrations: %w", err)}
	}
	return &memFile{Reader: bytes.NewReader([]byte(sql)), info: memInfo{FileInfo: info, size: int64(len(sql))}}, nil
}

// ReadDir lists the base's files: iofs finds the migrations through it.
func (f schemaFS) ReadDir(name string) ([]fs.DirEntry, error) { return fs.ReadDir(f.base, name) }

type memFile struct {
	*bytes.Reader
	info memInfo
}

func (m *memFile) Stat() (fs.FileInfo, error) { return m.info, nil }
func (m *memFile) Close() error               { return nil }

type memInfo struct {
	fs.FileInfo
	size int64
}

func (i memInfo) Size() int64 { return i.size }
