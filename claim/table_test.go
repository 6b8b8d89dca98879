package claim_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// New checks the job table against the catalog and says what is wrong with
// it, as invalid input, before any job is claimed.
func TestNewRefusesAJobTableThatDoesNotFit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(ctx, `
DROP VIEW IF EXISTS jobs_fit_view; DROP TABLE IF EXISTS jobs_fit_int_fence;
CREATE TABLE jobs_fit_int_fence (LIKE pgfence_jobs);
ALTER TABLE jobs_fit_int_fence ALTER COLUMN fence TYPE integer;
CREATE VIEW jobs_fit_view AS SELECT * FROM pgfence_jobs`); err != nil {
		t.Fatal(err)
	}
	with := func(change func(*claim.Table)) claim.Table { tb := claim.DefaultTable(); change(&tb); return tb }
	named := func(name string) claim.Table { return with(func(tb *claim.Table) { tb.Name = name }) }
	for _, c := range []struct {
		table claim.Table
		want  string
	}{
		{named("jobs_fit_missing"), `table "jobs_fit_missing" does not exist`},
		{with(func(tb *claim.Table) { tb.Schema = "no_such_schema" }), `table "no_such_schema"."pgfence_jobs" does not exist`},
		{named("jobs_fit_view"), `"jobs_fit_view" is not a table (relkind "v")`},
		{with(func(tb *claim.Table) { tb.LastError = "no_such_column" }), `table "pgfence_jobs" has no column "no_such_column" (the LastError column)`},
		{named("jobs_fit_int_fence"), `column "fence" of "jobs_fit_int_fence" (the Fence column) is integer; want one of bigint`},
	} {
		_, err := claim.New(ctx, pool, claim.WithTable(c.table))
		if !errors.Is(err, pgfence.ErrInvalidInput) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%s) = %v, want invalid input with %q", c.table.Name, err, c.want)
		}
		// One sentinel across packages: a claim refusal is lockless's too.
		if !errors.Is(err, pgfence.ErrInvalidInput) {
			t.Errorf("errors.Is(%v, pgfence.ErrInvalidInput) = false", err)
		}
	}
}
