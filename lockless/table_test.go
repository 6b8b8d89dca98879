package lockless_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/pgfence/pgfence/lockless"
)

// A helper's table must exist and be a table; the refusal says which.
func TestTableMustBeATable(t *testing.T) {
	ctx := context.Background()
	pool := setup(t)
	if _, err := pool.Exec(ctx, `CREATE OR REPLACE VIEW accounts_view AS SELECT * FROM accounts`); err != nil {
		t.Fatal(err)
	}
	for table, want := range map[lockless.Table]string{
		{Name: "no_such_table"}:                      `table "no_such_table" does not exist`,
		{Schema: "no_such_schema", Name: "accounts"}: `table "no_such_schema"."accounts" does not exist`,
		{Name: "accounts_view"}:                      `"accounts_view" is not a table (relkind "v")`,
	} {
		_, err := lockless.NewVersioned(ctx, pool, lockless.VersionedSpec{Table: table, Key: "account_id", Version: "version"})
		if !errors.Is(err, lockless.ErrInvalidInput) || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want invalid input with %q", table, err, want)
		}
	}
}
