package pgerr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

func server(code string) error {
	return fmt.Errorf("wrapped: %w", &pgconn.PgError{Severity: "ERROR", Code: code})
}

func TestCodeAndFromServer(t *testing.T) {
	if got := Code(server(pgerrcode.UndefinedTable)); got != "42P01" {
		t.Fatalf("Code = %q, want 42P01", got)
	}
	if !FromServer(server(pgerrcode.UndefinedTable)) {
		t.Fatal("FromServer(PgError) = false")
	}
	for _, err := range []error{nil, errors.New("conn closed"), context.Canceled} {
		if Code(err) != "" || FromServer(err) || Is(err, "") {
			t.Fatalf("%v classified as a server error", err)
		}
	}
}

// Each predicate accepts exactly its codes; every other code of the table,
// and errors that are no server answer, are refused.
func TestPredicates(t *testing.T) {
	all := []string{
		pgerrcode.UndefinedTable, pgerrcode.UndefinedFunction, pgerrcode.UndefinedColumn,
		pgerrcode.LockNotAvailable, pgerrcode.AdminShutdown, pgerrcode.CrashShutdown,
		pgerrcode.CannotConnectNow, pgerrcode.DatabaseDropped, pgerrcode.IdleSessionTimeout,
		pgerrcode.QueryCanceled, pgerrcode.TooManyConnections,
		pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected, pgerrcode.UniqueViolation,
		pgerrcode.DuplicateTable, pgerrcode.DuplicateSchema, pgerrcode.DuplicateFunction,
		pgerrcode.DuplicateObject, pgerrcode.InvalidSQLStatementName, pgerrcode.DuplicatePreparedStatement,
		pgerrcode.ConnectionFailure, pgerrcode.ConnectionException, pgerrcode.InsufficientPrivilege,
		StaleFence, NoFence,
	}
	cases := []struct {
		name string
		pred func(error) bool
		want []string
	}{
		{"IsUndefined", IsUndefined, []string{"42P01", "42883"}},
		{"IsLockNotAvailable", IsLockNotAvailable, []string{"55P03"}},
		{"IsTransient", IsTransient, []string{"57P01", "57P02", "57P03", "53300", "40001", "40P01", "55P03"}},
		{"IsUnavailable", IsUnavailable, []string{"57P01", "57P02", "57P03", "57P04", "57P05", "53300", "08006", "08000"}},
		{"IsDuplicate", IsDuplicate, []string{"23505", "42P07", "42P06", "42723", "42710"}},
		{"IsPreparedStatementClash", IsPreparedStatementClash, []string{"26000", "42P05"}},
	}
	for _, c := range cases {
		want := map[string]bool{}
		for _, code := range c.want {
			want[code] = true
		}
		for _, code := range all {
			if got := c.pred(server(code)); got != want[code] {
				t.Errorf("%s(%s) = %v, want %v", c.name, code, got, want[code])
			}
		}
		if c.pred(nil) || c.pred(errors.New("conn closed")) {
			t.Errorf("%s accepted an error that is no server answer", c.name)
		}
	}
}
