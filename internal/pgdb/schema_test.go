package pgdb_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/fencesql"
	"github.com/pgfence/pgfence/internal/pgdb"
	"github.com/pgfence/pgfence/internal/sqltmpl"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// Without a schema, the text is as sqlc wrote it; wrapping a wrapped db
// returns it (no second layer).
func TestNoSchemaIsIdentity(t *testing.T) {
	pool := pgtest.Pool(t)
	if w := pgdb.Wrap(pool, ""); pgdb.Wrap(w, "") != w || pgdb.WrapOwnMode(w, "") != w {
		t.Fatal("wrapping a wrapped db added a layer")
	}
	if got, err := pgdb.Expand(fencesql.CountJobsByState, ""); err != nil || got != fencesql.CountJobsByState {
		t.Fatalf("Expand without a schema changed the text: %v", err)
	}
}

// Many goroutines enqueue through one wrapper into one schema: every row
// lands there (none in the default layout), with the one cached expansion.
func TestConcurrentStatementsLandInTheSchema(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := pgtest.Pool(t)
	s := pgtest.Schema(t)
	q := fencedb.New(pgdb.Wrap(pool, s))
	const n = 32
	queue := "pgdb-schema-" + s
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := q.EnqueueJob(ctx, fencedb.EnqueueJobParams{Queue: queue, Payload: json.RawMessage("{}"), MaxAttempts: 1}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	var inSchema, inDefault int
	err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+pgx.Identifier{s}.Sanitize()+`.pgfence_jobs WHERE queue = $1),
		(SELECT count(*) FROM public.pgfence_jobs WHERE queue = $1)`, queue).Scan(&inSchema, &inDefault)
	if err != nil || inSchema != n || inDefault != 0 {
		t.Fatalf("rows: %d in the schema, %d in the default layout (err %v); want %d, 0", inSchema, inDefault, err, n)
	}
	a, err := pgdb.Expand(fencesql.CountJobsByState, s)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(a, `"`+s+`".pgfence_jobs`) || strings.Contains(a, "TEMPLATE") {
		t.Fatalf("expanded:\n%s", a)
	}
}

// A schema that was never migrated: the error says what to run.
func TestUnmigratedSchemaSaysWhatToRun(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	for name, w := range map[string]fencedb.DBTX{"extended": pgdb.Wrap(pool, "never_migrated"),
		"simple protocol": pgdb.WrapOwnMode(simple{pool}, "never_migrated")} {
		q := fencesql.New(w)
		_, err := q.CountJobsByState(ctx, "default") // Query
		if err == nil || !strings.Contains(err.Error(), "pgfence migrate up --schema never_migrated") {
			t.Errorf("%s, Query: error %v does not say to run pgfence migrate up --schema never_migrated", name, err)
		}
		_, err = fencedb.New(w).GetJob(ctx, 1) // QueryRow
		if err == nil || !strings.Contains(err.Error(), "pgfence migrate up --schema never_migrated") {
			t.Errorf("%s, QueryRow: error %v does not say to run pgfence migrate up --schema never_migrated", name, err)
		}
		_, err = q.DeleteFinishedJobs(ctx, 0) // Exec
		if err == nil || !strings.Contains(err.Error(), "pgfence migrate up --schema never_migrated") {
			t.Errorf("%s, Exec: error %v does not say to run pgfence migrate up --schema never_migrated", name, err)
		}
	}
}

// simple sends every statement with the simple protocol, which reports a
// missing table with the rows rather than from Query.
type simple struct{ db fencedb.DBTX }

func (s simple) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return s.db.Exec(ctx, sql, append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...)
}

func (s simple) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return s.db.Query(ctx, sql, append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...)
}

func (s simple) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return s.db.QueryRow(ctx, sql, append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...)
}

// A statement whose markers are wrong fails before it is sent.
func TestBadMarkerIsRefused(t *testing.T) {
	ctx := context.Background()
	db := pgdb.Wrap(pgtest.Pool(t), "s")
	bad := "SELECT 1 FROM /* TEMPLATE: schema */ lock_leases"
	if _, err := db.Exec(ctx, bad); !errors.Is(err, sqltmpl.ErrTemplate) {
		t.Fatalf("Exec: %v, want ErrTemplate", err)
	}
	if _, err := db.Query(ctx, bad); !errors.Is(err, sqltmpl.ErrTemplate) {
		t.Fatalf("Query: %v, want ErrTemplate", err)
	}
	if err := db.QueryRow(ctx, bad).Scan(); !errors.Is(err, sqltmpl.ErrTemplate) {
		t.Fatalf("QueryRow: %v, want ErrTemplate", err)
	}
}

// The cost a statement pays for a schema: one cached lookup of its text.
func BenchmarkExpandCached(b *testing.B) {
	if _, err := pgdb.Expand(fencesql.CountJobsByState, "bench"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := pgdb.Expand(fencesql.CountJobsByState, "bench"); err != nil {
			b.Fatal(err)
		}
	}
}
