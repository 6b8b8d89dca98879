package migrations

import (
	"io"
	"io/fs"
	"strings"
	"testing"
)

func TestExpandSchema(t *testing.T) {
	const src = `CREATE OR REPLACE FUNCTION /* TEMPLATE: schema */pgfence_f() AS $$
  SELECT /* TEMPLATE: schema */pgfence_g()::/* TEMPLATE: schema */pgfence_d + nextval('/* TEMPLATE: schema */pgfence_seq') /* plain */
$$;`
	got, err := expandSchema(src, "Fence One")
	if err != nil {
		t.Fatal(err)
	}
	want := `CREATE OR REPLACE FUNCTION "Fence One".pgfence_f() AS $$
  SELECT "Fence One".pgfence_g()::"Fence One".pgfence_d + nextval('"Fence One".pgfence_seq') /* plain */
$$;`
	if got != want {
		t.Fatalf("expanded:\n%s\nwant:\n%s", got, want)
	}
	plain, err := expandSchema(src, "")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain, "TEMPLATE") || !strings.Contains(plain, "nextval('pgfence_seq')") || !strings.Contains(plain, "FUNCTION pgfence_f()") {
		t.Fatalf("plain:\n%s", plain)
	}
	for _, bad := range []string{
		"SELECT /* TEMPLATE: schema */ pgfence_f()", // a space before the name
		"SELECT /* TEMPLATE: schema */Pgfence_f()",  // not lower case
		"SELECT /* TEMPLATE: table */pgfence_jobs",  // not a migration marker
		"SELECT /*TEMPLATE: schema*/pgfence_f()",    // not written exactly
		"SELECT /* TEMPLATE: schema */",             // nothing after it
		"SELECT 1 /* unterminated",
	} {
		if out, err := expandSchema(bad, "s"); err == nil {
			t.Errorf("expandSchema(%q) = %q, want an error", bad, out)
		}
	}
}

// Every embedded file expands for a schema and for none, and FS serves the
// files without markers.
func TestEmbeddedFilesExpand(t *testing.T) {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		t.Fatal(err)
	}
	marked := 0
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		raw, err := fs.ReadFile(files, e.Name())
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), schemaMarker) {
			marked++
		}
		if _, err := expandSchema(string(raw), "s"); err != nil {
			t.Errorf("%s: %v", e.Name(), err)
		}
		f, err := FS().Open(e.Name())
		if err != nil {
			t.Fatal(err)
		}
		plain, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(plain), "TEMPLATE") {
			t.Errorf("FS serves %s with its markers", e.Name())
		}
		info, _ := fs.Stat(FS(), e.Name())
		if info.Size() != int64(len(plain)) {
			t.Errorf("%s: Stat says %d bytes, read %d", e.Name(), info.Size(), len(plain))
		}
	}
	if marked == 0 {
		t.Fatal("no file holds a schema marker; migration 000007 should")
	}
}
