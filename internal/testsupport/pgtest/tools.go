package pgtest

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/internal/testsupport/dbenv"
)

// Tool returns the path of a PostgreSQL client program (psql, pg_dump),
// which come with the server binaries the tests need anyway; the test fails
// when it is missing.
func Tool(t testing.TB, name string) string {
	t.Helper()
	p, err := dbenv.ClientTool(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// BareDatabase creates an empty database (no migrations) on the test
// server and returns its URL; it is dropped when the test ends.
func BareDatabase(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	name := fmt.Sprintf("pgfence_bare_%d", rand.Int64())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, ServerURL()); err == nil {
			c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(ctx)
		}
	})
	cfg, err := pgx.ParseConfig(ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = name
	return dbenv.ConnString(cfg)
}

// restrictLine matches pg_dump's \restrict and \unrestrict lines, whose key
// is random on every run.
var restrictLine = regexp.MustCompile(`(?m)^\\(un)?restrict .*\n`)

// DumpSchema returns pg_dump --schema-only of the database at url, without
// the tables named in exclude (version tables) and without the lines that
// differ between two dumps of one catalog.
func DumpSchema(t testing.TB, url string, exclude ...string) string {
	t.Helper()
	args := []string{"--schema-only", "--no-owner", "--no-privileges"}
	for _, e := range exclude {
		args = append(args, "--exclude-table="+e)
	}
	args = append(args, "--dbname="+url)
	var out, stderr bytes.Buffer
	cmd := exec.Command(Tool(t, "pg_dump"), args...)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("pg_dump: %v: %s", err, stderr.String())
	}
	return restrictLine.ReplaceAllString(out.String(), "")
}

// DiffLines is a short report of the first lines where a and b differ, ""
// when they are equal.
func DiffLines(a, b string) string {
	if a == b {
		return ""
	}
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(la) || i < len(lb); i++ {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x != y {
			end := min(i+6, max(len(la), len(lb)))
			return fmt.Sprintf("first difference at line %d:\n- %s\n+ %s\n(lines %d-%d: %q vs %q)", i+1, x, y, i+1, end,
				strings.Join(la[i:min(end, len(la))], "\n"), strings.Join(lb[i:min(end, len(lb))], "\n"))
		}
	}
	return "they differ"
}
