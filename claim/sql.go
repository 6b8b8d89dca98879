package claim

import (
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/internal/fencesql"
	"github.com/pgfence/pgfence/internal/sqltmpl"
)

// statements are claim's SQL for one table. Their one source is
// queries/internal/claim.sql, written against pgfence_jobs and checked by sqlc, which
// generates its text as the fencesql constants; internal/sqltmpl fills in
// the table's own names (every identifier quoted by pgx.Identifier.Sanitize)
// and drops the parts on optional columns it lacks. Values are always bound.
type statements struct {
	claim, renew, complete, fail, release, rescue string
	// Batched forms, used by Runner: one statement for many jobs, each row
	// still matched on id + fence + state 'running'.
	renewMany, completeMany, readBack string
	// sweep is one batch of SweepFinished; "" when the table has no FinishedAt.
	sweep string
	// queueStats feeds the queue-depth gauges (metrics.go).
	queueStats string
}

// source pairs a statement with its sqlc-generated text.
type source struct {
	dst *string
	sql string
}

// sources lists every statement of s with its text in fencesql, one per
// statement of queries/internal/claim.sql.
func (s *statements) sources() []source {
	return []source{
		{&s.claim, fencesql.ClaimJobs}, {&s.renew, fencesql.RenewJob}, {&s.complete, fencesql.CompleteJob},
		{&s.fail, fencesql.FailJob}, {&s.release, fencesql.ReleaseJob}, {&s.rescue, fencesql.RescueJobs},
		{&s.renewMany, fencesql.RenewJobs}, {&s.completeMany, fencesql.CompleteJobs}, {&s.readBack, fencesql.ReadBackJobs},
		{&s.queueStats, fencesql.JobQueueStats}, {&s.sweep, fencesql.SweepFinishedJobsBatch},
	}
}

// buildStatements expands claim.sql for t, with pgfence's functions in
// schema ("" for the search_path).
func buildStatements(t Table, schema string) (statements, error) {
	var s statements
	names := t.names()
	names.Schema = schema
	for _, src := range s.sources() {
		if src.dst == &s.sweep && t.FinishedAt == "" {
			continue
		}
		var err error
		if *src.dst, err = expand(src.sql, names); err != nil {
			return statements{}, fmt.Errorf("claim: building the statements for table %s: %w", t.ident(), err)
		}
	}
	return s, nil
}

func expand(sql string, names sqltmpl.Names) (string, error) {
	tmpl, err := sqltmpl.Parse(sql)
	if err != nil {
		return "", err
	}
	return tmpl.Expand(names)
}

// names maps the names queries/internal/claim.sql is written with
// (pgfence_jobs and defaultTable's columns) to t's.
func (t Table) names() sqltmpl.Names {
	cols := map[string]string{}
	def := defaultTable().columns()
	for i, c := range t.columns() {
		cols[def[i].name] = c.name
	}
	return sqltmpl.Names{
		Tables:  map[string]pgx.Identifier{defaultTable().Name: t.identifier()},
		Columns: cols,
	}
}
