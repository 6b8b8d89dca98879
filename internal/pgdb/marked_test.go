package pgdb_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pgfence/pgfence/internal/pgdb"
)

// pgfenceName is a name of pgfence's objects, qualified with the test's
// schema or not.
var pgfenceName = regexp.MustCompile(`("zz"\.)?\b(lock_leases|payout_intents|pgfence_jobs|pgfence_abandoned_tokens|pgfence_fence_seq|pgfence_stale_refusals|pgfence_[a-z_]+\()`)

// Every statement in queries/ and queries/internal/ marks every pgfence
// object it names, so a client with a schema never reaches another schema's
// objects (claim.sql's and enqueue.sql's statements, filled in for a job
// table of one's own, are checked by claim).
func TestEveryStatementMarksPgfenceObjects(t *testing.T) {
	public, err := filepath.Glob("../../queries/*.sql")
	if err != nil || len(public) == 0 {
		t.Fatalf("no query files: %v", err)
	}
	own, err := filepath.Glob("../../queries/internal/*.sql")
	if err != nil || len(own) == 0 {
		t.Fatalf("no internal query files: %v", err)
	}
	files := append(public, own...)
	checked := 0
	for _, f := range files {
		if base := filepath.Base(f); base == "claim.sql" || base == "enqueue.sql" {
			continue
		}
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, stmt := range strings.Split(string(raw), "-- name: ")[1:] {
			stmt = "-- name: " + stmt
			sql, err := pgdb.Expand(stmt, "zz")
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			for _, m := range pgfenceName.FindAllStringSubmatch(code(sql), -1) {
				if m[1] == "" {
					t.Errorf("%s: statement %.40q names %s without a schema marker", f, stmt, m[2])
				}
			}
			checked++
		}
	}
	if checked < 20 {
		t.Fatalf("checked only %d statements", checked)
	}
}

// code is sql without its comments and string literals (a channel name such
// as 'pgfence_lease_released' is not an object).
func code(sql string) string {
	var b strings.Builder
	for i := 0; i < len(sql); i++ {
		switch {
		case strings.HasPrefix(sql[i:], "--"):
			for i < len(sql) && sql[i] != '\n' {
				i++
			}
		case sql[i] == '\'':
			for i++; i < len(sql) && sql[i] != '\''; i++ {
			}
		default:
			b.WriteByte(sql[i])
		}
	}
	return b.String()
}
