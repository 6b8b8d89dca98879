package lockless_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/lockless"
)

// TestInsertOnceNeedsUniqueIndex: NewInsertOnce refuses conflict columns
// that no unique index covers exactly, and each refusal is one PostgreSQL
// would have made on every Insert; conflict columns that a unique index,
// constraint or primary key covers exactly (in any order, INCLUDE columns
// aside) are accepted and work.
func TestInsertOnceNeedsUniqueIndex(t *testing.T) {
	ctx := context.Background()
	pool := setup(t)
	const ddl = `
DROP TABLE IF EXISTS dedup_idx;
CREATE TABLE dedup_idx (
  a int NOT NULL, b int NOT NULL, c int NOT NULL, d int NOT NULL, e int NOT NULL,
  f int NOT NULL, g int NOT NULL, h text NOT NULL, p int NOT NULL, x int, z int
);
CREATE INDEX ON dedup_idx (a);                                   -- not unique
CREATE UNIQUE INDEX ON dedup_idx (b, c);                         -- a superset of (b)
CREATE UNIQUE INDEX ON dedup_idx (d) WHERE d > 0;                -- partial
ALTER TABLE dedup_idx ADD UNIQUE (e) DEFERRABLE INITIALLY IMMEDIATE;  -- deferrable
CREATE UNIQUE INDEX ON dedup_idx (lower(h));                     -- expression
CREATE UNIQUE INDEX ON dedup_idx (g, f);                         -- (f, g) in another order
ALTER TABLE dedup_idx ADD PRIMARY KEY (p);
CREATE UNIQUE INDEX ON dedup_idx (x) INCLUDE (a);                -- INCLUDE columns are not key columns`
	if _, err := pool.Exec(ctx, ddl); err != nil {
		t.Fatal(err)
	}
	all := []string{"a", "b", "c", "d", "e", "f", "g", "h", "p", "x", "z"}
	values := []any{1, 2, 3, 4, 5, 6, 7, "h", 9, 10, 11}
	spec := func(on ...string) lockless.InsertOnceSpec {
		return lockless.InsertOnceSpec{Table: lockless.Table{Name: "dedup_idx"}, Columns: all, ConflictOn: on, Returning: []string{"p"}}
	}
	t.Run("refused", func(t *testing.T) {
		for name, on := range map[string][]string{
			"no index":          {"z"},
			"non-unique index":  {"a"},
			"part of a key":     {"b"},
			"superset of a key": {"b", "c", "a"},
			"partial":           {"d"},
			"deferrable":        {"e"},
			"expression":        {"h"},
			"include column":    {"x", "a"},
		} {
			t.Run(name, func(t *testing.T) {
				_, err := lockless.NewInsertOnce(ctx, pool, spec(on...))
				if !errors.Is(err, pgfence.ErrInvalidInput) {
					t.Errorf("%s %v: got %v, want pgfence.ErrInvalidInput", name, on, err)
					return
				}
				t.Logf("%s: %v", name, err)
				// PostgreSQL agrees: the statement NewInsertOnce would have
				// prepared fails.
				sql := "INSERT INTO dedup_idx (a, b, c, d, e, f, g, h, p, x, z) VALUES (1, 2, 3, 4, 5, 6, 7, 'h', 9, 10, 11) ON CONFLICT (" + strings.Join(on, ", ") + ") DO NOTHING"
				var pgErr *pgconn.PgError
				if _, err := pool.Exec(ctx, sql); !errors.As(err, &pgErr) {
					t.Errorf("%s: PostgreSQL accepted ON CONFLICT (%s): %v", name, strings.Join(on, ", "), err)
				} else {
					t.Logf("%s: PostgreSQL says %s %s", name, pgErr.Code, pgErr.Message)
				}
			})
		}
	})

	t.Run("accepted", func(t *testing.T) {
		for name, on := range map[string][]string{
			"unique index, other order": {"f", "g"},
			"primary key":               {"p"},
			"unique with INCLUDE":       {"x"},
		} {
			t.Run(name, func(t *testing.T) {
				ins, err := lockless.NewInsertOnce(ctx, pool, spec(on...))
				if err != nil {
					t.Errorf("%s %v: %v", name, on, err)
					return
				}
				var p int
				won, err := ins.Insert(ctx, pool, values, &p)
				if err != nil || p != 9 {
					t.Errorf("%s: Insert = %v, %v, p=%d", name, won, err, p)
				}
			})
		}
	})

	// The refused statements wrote nothing; the accepted specs, one row
	// between them.
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM dedup_idx").Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows: %d, %v; want exactly one", n, err)
	}
}
