package sqltmpl_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/internal/sqltmpl"
)

const stmt = `-- name: Claim :many

SELECT x.id, /* TEMPLATE: col */id, j./* TEMPLATE: col */state, 'a /* TEMPLATE: col */id', "id /* TEMPLATE_IF: q */"
  FROM /* TEMPLATE: table */pgfence_jobs AS j, ROWS FROM (unnest($1::bigint[])) AS x(id) -- id /* TEMPLATE: bogus */
 WHERE /* an ordinary comment */ /* TEMPLATE: schema */pgfence_next_fence() > $$ /* TEMPLATE: col */id $$ AND $tag$ $ $tag$ = '''' || E'\' /* TEMPLATE_END */ \''/* TEMPLATE_IF: queue */
   AND /* TEMPLATE: col */queue = $2/* TEMPLATE_END */
`

func names(queue string) sqltmpl.Names {
	return sqltmpl.Names{
		Tables:  map[string]pgx.Identifier{"pgfence_jobs": {"my schema", `My "Jobs"`}},
		Columns: map[string]string{"id": "job_id", "state": "Status", "queue": queue},
	}
}

func parse(t *testing.T, sql string) *sqltmpl.Template {
	t.Helper()
	tmpl, err := sqltmpl.Parse(sql)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// Only marked names change, each quoted; literals, quoted identifiers,
// comments, dollar-quoted strings and aliases stay as written, however
// marker-like their text.
func TestExpandReplacesOnlyMarkedNames(t *testing.T) {
	tmpl := parse(t, stmt)
	if tmpl.Name() != "Claim" {
		t.Errorf("name %q", tmpl.Name())
	}
	got, err := tmpl.Expand(names("Queue"))
	if err != nil {
		t.Fatal(err)
	}
	want := `SELECT x.id, "job_id", j."Status", 'a /* TEMPLATE: col */id', "id /* TEMPLATE_IF: q */"
  FROM "my schema"."My ""Jobs""" AS j, ROWS FROM (unnest($1::bigint[])) AS x(id) -- id /* TEMPLATE: bogus */
 WHERE /* an ordinary comment */ pgfence_next_fence() > $$ /* TEMPLATE: col */id $$ AND $tag$ $ $tag$ = '''' || E'\' /* TEMPLATE_END */ \''
   AND "Queue" = $2`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// A section on a column the table lacks is dropped with its markers.
func TestExpandDropsSectionOnMissingColumn(t *testing.T) {
	got, err := parse(t, stmt).Expand(names(""))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(got, `\''`) || strings.Contains(got, "$2") {
		t.Errorf("section kept:\n%s", got)
	}
}

// Plain is the text sqlc parsed, without markers.
func TestPlain(t *testing.T) {
	got := parse(t, stmt).Plain()
	for _, want := range []string{"SELECT x.id, id, j.state,", "FROM pgfence_jobs AS j", "WHERE /* an ordinary comment */ pgfence_next_fence() >", `\''` + "\n   AND queue = $2"} {
		if !strings.Contains(got, want) {
			t.Errorf("Plain lacks %q:\n%s", want, got)
		}
	}
}

// The schema prefix goes before schema-marked names and before table-marked
// names that Tables does not map (pgfence's own tables); a mapped table is
// used as given.
func TestSchemaPrefix(t *testing.T) {
	tmpl := parse(t, `SELECT /* TEMPLATE: schema */pgfence_next_fence() FROM /* TEMPLATE: table */lock_leases, /* TEMPLATE: table */pgfence_jobs`)
	for _, c := range []struct {
		names sqltmpl.Names
		want  string
	}{
		{sqltmpl.Names{}, `SELECT pgfence_next_fence() FROM lock_leases, pgfence_jobs`},
		{sqltmpl.Names{Schema: "client 7"}, `SELECT "client 7".pgfence_next_fence() FROM "client 7".lock_leases, "client 7".pgfence_jobs`},
		{sqltmpl.Names{Schema: "c", Tables: map[string]pgx.Identifier{"pgfence_jobs": {"mine"}}}, `SELECT "c".pgfence_next_fence() FROM "c".lock_leases, "mine"`},
	} {
		got, err := tmpl.Expand(c.names)
		if err != nil || got != c.want {
			t.Errorf("Expand(%+v) = %q, %v; want %q", c.names, got, err, c.want)
		}
	}
}

// A mistake in a statement's markers fails Parse, naming the statement.
func TestParseRefusesBadMarkers(t *testing.T) {
	for sql, want := range map[string]string{
		`SELECT /* TEMPLATE: column */id`:                   "unknown marker",
		`SELECT /* TEMPLATE:col */id`:                       "unknown marker",
		`SELECT /* TEMPLATEX */id`:                          "unknown marker",
		`SELECT /* TEMPLATE: col */ id`:                     "not followed at once",
		`SELECT /* TEMPLATE: col */"id"`:                    "not followed at once",
		`SELECT /* TEMPLATE: table */Jobs`:                  "not followed at once",
		`SELECT 1/* TEMPLATE_IF: queue */`:                  "without TEMPLATE_END",
		`SELECT 1/* TEMPLATE_END */`:                        "without TEMPLATE_IF",
		`SELECT 1/* TEMPLATE_IF: a *//* TEMPLATE_IF: b */`:  "inside a section",
		`SELECT 1/* TEMPLATE_IF: a b */ /* TEMPLATE_END */`: "one lower-case column name",
		`SELECT 1/* TEMPLATE_IF: */ /* TEMPLATE_END */`:     "one lower-case column name",
		`SELECT 1 /* unterminated`:                          "unterminated comment",
		`SELECT 1 /* a /* nested */ */`:                     "nested comment",
		`SELECT 'unterminated`:                              "unterminated '",
		`SELECT "unterminated`:                              `unterminated "`,
		`SELECT $q$ unterminated`:                           "unterminated $q$",
		"-- name: Bad :one\nSELECT /* TEMPLATE: col */ id":  "(statement Bad)",
	} {
		_, err := sqltmpl.Parse(sql)
		if !errors.Is(err, sqltmpl.ErrTemplate) || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v; want ErrTemplate with %q", sql, err, want)
		}
	}
}

// Expand refuses names it cannot fill in, naming the statement.
func TestExpandRefusesMissingNames(t *testing.T) {
	tmpl := parse(t, "-- name: S :one\nSELECT /* TEMPLATE: col */id/* TEMPLATE_IF: queue */, /* TEMPLATE: col */last_error/* TEMPLATE_END */")
	for _, c := range []struct {
		cols map[string]string
		want string
	}{
		{map[string]string{"queue": "q", "last_error": "e"}, "no name given for column id"},
		{map[string]string{"id": "i", "last_error": "e"}, "no name given for column queue"},
		{map[string]string{"id": "", "queue": "", "last_error": ""}, "no id column"},
		{map[string]string{"id": "i", "queue": "q", "last_error": ""}, "no last_error column"},
	} {
		_, err := tmpl.Expand(sqltmpl.Names{Columns: c.cols})
		if !errors.Is(err, sqltmpl.ErrTemplate) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "(statement S)") {
			t.Errorf("Expand(%v) = %v; want ErrTemplate with %q", c.cols, err, c.want)
		}
	}
	// A column referenced only in a dropped section need not exist.
	got, err := tmpl.Expand(sqltmpl.Names{Columns: map[string]string{"id": "i", "queue": "", "last_error": ""}})
	if err != nil || got != `SELECT "i"` {
		t.Errorf("Expand = %q, %v", got, err)
	}
}

// A template is read-only: many goroutines expand one at once.
func TestExpandConcurrently(t *testing.T) {
	tmpl := parse(t, stmt)
	want, _ := tmpl.Expand(names("q"))
	errs := make(chan error, 16)
	for range 16 {
		go func() {
			for range 100 {
				if got, err := tmpl.Expand(names("q")); err != nil || got != want {
					errs <- errors.New("different expansion: " + got)
					return
				}
			}
			errs <- nil
		}()
	}
	for range 16 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
