package catalog_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/internal/catalog"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/internal/validate"
)

// TestTableRefusals: every package's lookup of a user's table refuses a
// missing table and a view in the same words, as bad input.
func TestTableRefusals(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema(t, pool, "cat_table", "CREATE TABLE t (id int); CREATE VIEW v AS SELECT 1 AS x")
	for _, tc := range []struct {
		name pgx.Identifier
		hint string
		want string // "" for found
	}{
		{pgx.Identifier{"cat_table", "t"}, "", ""},
		{pgx.Identifier{"cat_table", "nope"}, "", `claim: invalid input: table "cat_table"."nope" does not exist (or this role cannot see it)`},
		{pgx.Identifier{"nope"}, "run the migrations", `claim: invalid input: table "nope" does not exist in any schema on the search_path (or this role cannot see it); run the migrations`},
		{pgx.Identifier{"cat_table", "v"}, "", `claim: invalid input: "cat_table"."v" is not a table (relkind "v")`},
	} {
		rel, err := catalog.Table(ctx, pool, "claim", tc.name, tc.hint)
		switch {
		case tc.want == "" && (err != nil || rel.Name != tc.name[len(tc.name)-1]):
			t.Errorf("%v: %v, %v", tc.name, rel, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want || !errors.Is(err, validate.ErrInvalidInput)):
			t.Errorf("%v: %v\nwant %s", tc.name, err, tc.want)
		}
	}
}
