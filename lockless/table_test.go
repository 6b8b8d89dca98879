package lockless_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/pgfence/pgfence"
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
		_, err := lockless.NewVersioned(ctx, pool, table, "account_id", "version")
		if !errors.Is(err, pgfence.ErrInvalidInput) || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want invalid input with %q", table, err, want)
		}
	}
}

// Versioned and Counter refuse a key without a unique index of its own: an
// update meant for one row would change every row with that key.
func TestKeyMustBeUnique(t *testing.T) {
	ctx := context.Background()
	pool := setup(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS loose_accounts (owner text, version bigint, quantity bigint, UNIQUE (owner, version))`); err != nil {
		t.Fatal(err)
	}
	table := lockless.Table{Name: "loose_accounts"}
	const want = `no unique index or constraint on exactly ("owner")`
	if _, err := lockless.NewVersioned(ctx, pool, table, "owner", "version"); !errors.Is(err, pgfence.ErrInvalidInput) || !strings.Contains(err.Error(), want) {
		t.Errorf("NewVersioned on a non-unique key: %v, want invalid input with %q", err, want)
	}
	if _, err := lockless.NewCounter(ctx, pool, table, "owner", "quantity"); !errors.Is(err, pgfence.ErrInvalidInput) || !strings.Contains(err.Error(), want) {
		t.Errorf("NewCounter on a non-unique key: %v, want invalid input with %q", err, want)
	}
}
