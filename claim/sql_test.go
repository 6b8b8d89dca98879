package claim

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pgfence/pgfence/internal/sqltmpl"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// Every statement claim sends is one of queries/internal/claim.sql, and for the
// ready-made table it is the text sqlc checked against the schema: the
// expansion for DefaultTable differs from it only by its markers and by
// quoting the default names. (sqlc diff, in CI, keeps the fencesql constants
// equal to the file.)
func TestStatementsAreTheCheckedSQL(t *testing.T) {
	t.Parallel()
	file, err := os.ReadFile("../queries/internal/claim.sql")
	if err != nil {
		t.Fatal(err)
	}
	var inFile []string
	for _, m := range regexp.MustCompile(`(?m)^-- name: (\w+) `).FindAllStringSubmatch(string(file), -1) {
		inFile = append(inFile, m[1])
	}
	s, err := buildStatements(DefaultTable(), "")
	if err != nil {
		t.Fatal(err)
	}
	var used []string
	for _, src := range s.sources() {
		tmpl, err := sqltmpl.Parse(src.sql)
		if err != nil {
			t.Fatal(err)
		}
		used = append(used, tmpl.Name())
		if got := unquoteDefaults(*src.dst); got != tmpl.Plain() {
			t.Errorf("%s for DefaultTable, unquoted:\n%s\nsqlc checked:\n%s", tmpl.Name(), got, tmpl.Plain())
		}
		if strings.Contains(*src.dst, "TEMPLATE") || strings.HasPrefix(*src.dst, "--") {
			t.Errorf("%s keeps a marker or sqlc's name line:\n%s", tmpl.Name(), *src.dst)
		}
	}
	slices.Sort(inFile)
	slices.Sort(used)
	if !slices.Equal(inFile, used) {
		t.Errorf("queries/internal/claim.sql has %v; claim uses %v", inFile, used)
	}
}

// unquoteDefaults turns the default names' quoted form back into the plain
// one the .sql file writes; nothing else in it is quoted.
func unquoteDefaults(sql string) string {
	names := DefaultTable().names()
	for n := range names.Tables {
		sql = strings.ReplaceAll(sql, `"`+n+`"`, n)
	}
	for n := range names.Columns {
		sql = strings.ReplaceAll(sql, `"`+n+`"`, n)
	}
	return sql
}

// Every statement, with and without the optional columns' parts, is valid
// for a table whose names all differ from pgfence_jobs': any name the file
// forgot to mark, or a parameter left out of order when a part is dropped,
// fails to prepare.
func TestStatementsPrepareForEveryTableShape(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(ctx, renamedTablesDDL); err != nil {
		t.Fatal(err)
	}
	full := Table{Schema: "Sql Test", Name: "All Renamed", ID: "Job Id", State: "Status", Priority: "Prio", RunAt: "Not Before",
		Attempt: "Tries", MaxAttempts: "Max Tries", Fence: "Token", Owner: "Worker", ExpiresAt: "Leased To",
		Queue: "Line", LastError: "Why", FinishedAt: "Done At", Payload: "Body"}
	minimal := full
	minimal.Queue, minimal.LastError, minimal.FinishedAt, minimal.Payload = "", "", "", ""
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for name, tb := range map[string]Table{"default": DefaultTable(), "all renamed": full, "no optional columns": minimal} {
		if err := tb.verify(ctx, pool, ""); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		s, err := buildStatements(tb, "")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, src := range s.sources() {
			if src.dst == &s.sweep && tb.FinishedAt == "" {
				continue // SweepFinished refuses such a table
			}
			if _, err := conn.Conn().PgConn().Prepare(ctx, "", *src.dst, nil); err != nil {
				t.Errorf("%s: %v\n%s", name, err, *src.dst)
			}
		}
	}
}

// renamedTablesDDL: no column shares a name with pgfence_jobs', and every
// name needs quoting.
const renamedTablesDDL = `
DROP SCHEMA IF EXISTS "Sql Test" CASCADE;
CREATE SCHEMA "Sql Test";
CREATE TABLE "Sql Test"."All Renamed" (
  "Job Id"     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  "Line"       text NOT NULL DEFAULT 'default',
  "Body"       jsonb NOT NULL DEFAULT '{}',
  "Status"     text NOT NULL DEFAULT 'available',
  "Prio"       integer NOT NULL DEFAULT 0,
  "Not Before" timestamptz NOT NULL DEFAULT now(),
  "Tries"      integer NOT NULL DEFAULT 0,
  "Max Tries"  integer NOT NULL DEFAULT 2,
  "Token"      bigint,
  "Worker"     text,
  "Leased To"  timestamptz,
  "Why"        text,
  "Done At"    timestamptz
);`
