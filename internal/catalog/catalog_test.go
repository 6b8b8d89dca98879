package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/internal/catalog"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// schema makes a schema of the test's own, runs setup in it (it is first
// on the search_path) and drops it when the test ends.
func schema(t *testing.T, pool *pgxpool.Pool, name, setup string) {
	t.Helper()
	ctx := context.Background()
	quoted := pgx.Identifier{name}.Sanitize()
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+quoted+" CASCADE; CREATE SCHEMA "+quoted); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Exec(context.Background(), "DROP SCHEMA "+quoted+" CASCADE") })
	if _, err := pool.Exec(ctx, "SET search_path TO "+quoted+"; "+setup+"; RESET search_path"); err != nil {
		t.Fatal(err)
	}
}

// onPath returns a connection whose search_path is path.
func onPath(t *testing.T, pool *pgxpool.Pool, path string) *pgxpool.Conn {
	t.Helper()
	c, err := pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Exec(context.Background(), "RESET search_path")
		c.Release()
	})
	if _, err := c.Exec(context.Background(), "SET search_path TO "+path); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestResolve(t *testing.T) {
	pool := pgtest.Pool(t)
	ctx := context.Background()
	schema(t, pool, "Cat Resolve", `
CREATE TABLE "My Jobs" (id bigint PRIMARY KEY, gone int, state varchar(20) NOT NULL, fence bigint NOT NULL DEFAULT 0);
ALTER TABLE "My Jobs" DROP COLUMN gone;
CREATE TABLE empty ();
CREATE VIEW jobs_view AS SELECT id FROM "My Jobs";
CREATE TABLE parted (id int) PARTITION BY RANGE (id)`)

	r, err := catalog.Resolve(ctx, pool, pgx.Identifier{"Cat Resolve", "My Jobs"})
	if err != nil {
		t.Fatal(err)
	}
	want := []catalog.Column{
		{Name: "id", Num: 1, Type: "bigint", NotNull: true},
		{Name: "state", Num: 3, Type: "character varying(20)", NotNull: true},
		{Name: "fence", Num: 4, Type: "bigint", NotNull: true},
	}
	if r.Schema != "Cat Resolve" || r.Name != "My Jobs" || r.Display != `"Cat Resolve"."My Jobs"` || !r.IsTable() || r.OID == 0 {
		t.Fatalf("resolved %+v", r)
	}
	if !reflect.DeepEqual(r.Columns, want) {
		t.Fatalf("columns %+v, want %+v (the dropped column left out)", r.Columns, want)
	}
	if c, ok := r.Column("state"); !ok || c.Type != "character varying(20)" {
		t.Fatalf("Column(state) = %+v, %v", c, ok)
	}
	if _, ok := r.Column("State"); ok {
		t.Fatal("Column is not case-sensitive")
	}
	if got := r.Quoted(); got != `"Cat Resolve"."My Jobs"` {
		t.Fatalf("Quoted = %s", got)
	}

	for name, wantKind := range map[string]string{"empty": "r", "jobs_view": "v", "parted": "p"} {
		r, err := catalog.Resolve(ctx, pool, pgx.Identifier{"Cat Resolve", name})
		if err != nil {
			t.Fatal(err)
		}
		if r.Kind != wantKind || r.IsTable() != (wantKind != "v") {
			t.Fatalf("%s: kind %q, IsTable %v", name, r.Kind, r.IsTable())
		}
		if name == "empty" && len(r.Columns) != 0 {
			t.Fatalf("empty has columns %+v", r.Columns)
		}
	}

	for _, name := range []pgx.Identifier{{"Cat Resolve", "missing"}, {"no such schema", "My Jobs"}, {"My Jobs"}} {
		if _, err := catalog.Resolve(ctx, pool, name); !errors.Is(err, catalog.ErrNotFound) {
			t.Fatalf("Resolve(%s) = %v, want ErrNotFound", name.Sanitize(), err)
		}
	}
}

// An unqualified name is found through the connection's search_path, in
// its first schema that has it, as the caller's own SQL would find it.
func TestResolveThroughSearchPath(t *testing.T) {
	pool := pgtest.Pool(t)
	ctx := context.Background()
	schema(t, pool, "cat_path_a", "CREATE TABLE jobs (a int)")
	schema(t, pool, "cat_path_b", "CREATE TABLE jobs (b int)")
	for path, want := range map[string]string{"cat_path_a, cat_path_b": "cat_path_a", "cat_path_b, cat_path_a": "cat_path_b"} {
		r, err := catalog.Resolve(ctx, onPath(t, pool, path), pgx.Identifier{"jobs"})
		if err != nil {
			t.Fatal(err)
		}
		if r.Schema != want || r.Display != want+".jobs" {
			t.Fatalf("search_path %s: resolved %s", path, r.Display)
		}
	}
}

func TestUniqueIndexes(t *testing.T) {
	pool := pgtest.Pool(t)
	ctx := context.Background()
	schema(t, pool, "cat_idx", `
CREATE TABLE t (id int PRIMARY KEY, a int, b int, c text, d int, e int, f int, dup int);
ALTER TABLE t ADD CONSTRAINT t_ab UNIQUE (b, a);
ALTER TABLE t ADD CONSTRAINT t_d_deferred UNIQUE (d) DEFERRABLE INITIALLY DEFERRED;
CREATE UNIQUE INDEX t_c_partial ON t (c) WHERE a > 0;
CREATE UNIQUE INDEX t_lower_c ON t (lower(c));
CREATE UNIQUE INDEX t_e_incl ON t (e) INCLUDE (f);
CREATE INDEX t_plain ON t (f);
INSERT INTO t (id, dup) VALUES (1, 7), (2, 7)`)
	// A failed CREATE INDEX CONCURRENTLY leaves an invalid index behind.
	if _, err := pool.Exec(ctx, "CREATE UNIQUE INDEX CONCURRENTLY t_dup_invalid ON cat_idx.t (dup)"); err == nil {
		t.Fatal("CREATE UNIQUE INDEX on duplicates succeeded")
	}
	r, err := catalog.Resolve(ctx, pool, pgx.Identifier{"cat_idx", "t"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := catalog.UniqueIndexes(ctx, pool, r)
	if err != nil {
		t.Fatal(err)
	}
	want := []catalog.Index{
		{Name: "t_ab", Columns: []string{"b", "a"}, Valid: true, Immediate: true},
		{Name: "t_c_partial", Columns: []string{"c"}, Valid: true, Immediate: true, Partial: true},
		{Name: "t_d_deferred", Columns: []string{"d"}, Valid: true},
		{Name: "t_dup_invalid", Columns: []string{"dup"}, Immediate: true},
		{Name: "t_e_incl", Columns: []string{"e"}, Valid: true, Immediate: true},
		{Name: "t_lower_c", Columns: []string{""}, Valid: true, Immediate: true, Expression: true},
		{Name: "t_pkey", Columns: []string{"id"}, Valid: true, Immediate: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("unique indexes:\n got %+v\nwant %+v", got, want)
	}

	byName := map[string]catalog.Index{}
	for _, ix := range got {
		byName[ix.Name] = ix
	}
	for _, c := range []struct {
		index string
		cols  []string
		want  bool
	}{
		{"t_pkey", []string{"id"}, true},
		{"t_ab", []string{"a", "b"}, true}, // any order
		{"t_ab", []string{"a"}, false},
		{"t_ab", []string{"a", "b", "c"}, false},
		{"t_e_incl", []string{"e"}, true}, // INCLUDE columns are no key
		{"t_e_incl", []string{"e", "f"}, false},
		{"t_d_deferred", []string{"d"}, true}, // unique at commit; arbiters check Immediate
		{"t_c_partial", []string{"c"}, false},
		{"t_lower_c", []string{""}, false},
		{"t_dup_invalid", []string{"dup"}, false},
	} {
		if got := byName[c.index].UniqueOn(c.cols...); got != c.want {
			t.Errorf("%s.UniqueOn(%q) = %v, want %v", c.index, c.cols, got, c.want)
		}
	}
}

func TestInheritors(t *testing.T) {
	pool := pgtest.Pool(t)
	ctx := context.Background()
	schema(t, pool, "cat_inh", `
CREATE TABLE parent (id int);
CREATE TABLE "Child" () INHERITS (parent);
CREATE TABLE grandchild () INHERITS ("Child");
CREATE TABLE other_parent (x int);
CREATE TABLE two_parents () INHERITS (parent, other_parent);
CREATE TABLE parted (id int) PARTITION BY RANGE (id);
CREATE TABLE part1 PARTITION OF parted FOR VALUES FROM (0) TO (10)`)
	for table, want := range map[string][]string{
		"parent": {`cat_inh."Child"`, "cat_inh.grandchild", "cat_inh.two_parents"},
		"Child":  {"cat_inh.grandchild"},
		"parted": nil, // partitions get a partitioned table's triggers from PostgreSQL itself
	} {
		r, err := catalog.Resolve(ctx, pool, pgx.Identifier{"cat_inh", table})
		if err != nil {
			t.Fatal(err)
		}
		got, err := catalog.Inheritors(ctx, pool, r)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got, want)) {
			t.Fatalf("Inheritors(%s) = %q, want %q", table, got, want)
		}
	}
}

func TestTriggerArgs(t *testing.T) {
	pool := pgtest.Pool(t)
	ctx := context.Background()
	schema(t, pool, "cat_trg", `
CREATE TABLE t (id int);
CREATE FUNCTION noop() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END';
CREATE TRIGGER with_args BEFORE UPDATE ON t FOR EACH ROW EXECUTE FUNCTION noop('strict', '', 'My Col');
CREATE TRIGGER without_args BEFORE UPDATE ON t FOR EACH ROW EXECUTE FUNCTION noop()`)
	r, err := catalog.Resolve(ctx, pool, pgx.Identifier{"cat_trg", "t"})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]string{"with_args": {"strict", "", "My Col"}, "without_args": {}} {
		args, ok, err := catalog.TriggerArgs(ctx, pool, r, name)
		if err != nil || !ok || !reflect.DeepEqual(args, want) {
			t.Fatalf("TriggerArgs(%s) = %q, %v, %v; want %q", name, args, ok, err, want)
		}
	}
	if args, ok, err := catalog.TriggerArgs(ctx, pool, r, "missing"); err != nil || ok || args != nil {
		t.Fatalf("TriggerArgs(missing) = %q, %v, %v", args, ok, err)
	}
}

func TestFunctionExists(t *testing.T) {
	pool := pgtest.Pool(t)
	for sig, want := range map[string]bool{"pgfence_next_fence()": true, "pgfence_next_fence(int)": false, "no_such_function()": false} {
		got, err := catalog.FunctionExists(context.Background(), pool, sig)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("FunctionExists(%s) = %v, want %v", sig, got, want)
		}
	}
}

// Behind PgBouncer in transaction pooling mode, with pgx's default exec
// mode (named prepared statements), many readers at once: every statement
// goes through pgdb.Wrap, so none depends on a server session's state.
func TestBehindPgBouncer(t *testing.T) {
	bounced := pgtest.BouncerPool(t, func(c *pgxpool.Config) { c.MaxConns = 8 })
	schema(t, pgtest.Pool(t), "cat_bouncer", "CREATE TABLE t (id int PRIMARY KEY, v text); CREATE TABLE c () INHERITS (t)")
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			for range 10 {
				if err := readAll(bounced); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func readAll(db *pgxpool.Pool) error {
	ctx := context.Background()
	r, err := catalog.Resolve(ctx, db, pgx.Identifier{"cat_bouncer", "t"})
	if err != nil {
		return err
	}
	ixs, err := catalog.UniqueIndexes(ctx, db, r)
	if err != nil {
		return err
	}
	kids, err := catalog.Inheritors(ctx, db, r)
	if err != nil {
		return err
	}
	ok, err := catalog.FunctionExists(ctx, db, "pgfence_next_fence()")
	if err != nil {
		return err
	}
	if len(r.Columns) != 2 || len(ixs) != 1 || len(kids) != 1 || !ok {
		return fmt.Errorf("through PgBouncer: %d columns, %d indexes, %d children, function %v", len(r.Columns), len(ixs), len(kids), ok)
	}
	return nil
}
