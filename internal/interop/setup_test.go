package interop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/internal/testsupport/needtool"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// database is a fresh database with pgfence's schema, a resource table for
// guarded writes and a record of every lease row version (lease_history),
// which the checks read. It returns its URL and a pool on it.
func database(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	url := pgtest.BareDatabase(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(ctx, `
CREATE TABLE resource (key text PRIMARY KEY, last_fence bigint NOT NULL DEFAULT 0,
                       writes int NOT NULL DEFAULT 0, last_writer text);
CREATE TABLE lease_history (id bigserial PRIMARY KEY, lock_key text, fence bigint, owner text,
                            acquired_at timestamptz, expires_at timestamptz);
CREATE FUNCTION record_lease() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO lease_history (lock_key, fence, owner, acquired_at, expires_at)
  VALUES (NEW.lock_key, NEW.fence, NEW.owner, NEW.acquired_at, NEW.expires_at);
  RETURN NULL;
END $$;
CREATE TRIGGER record_lease AFTER INSERT OR UPDATE ON lock_leases FOR EACH ROW EXECUTE FUNCTION record_lease();`)
	if err != nil {
		t.Fatal(err)
	}
	return url, pool
}

// guardedWrite is the guarded-write predicate every client uses: the write
// counts only under a fence at least as new as the row's.
const guardedWrite = `UPDATE resource SET last_fence = $1, writes = writes + 1, last_writer = $2
 WHERE key = $3 AND last_fence <= $1`

// python returns a Python interpreter with psycopg (3) or psycopg2. Without
// one the test is skipped, loudly, or fails when PGFENCE_REQUIRE_PYTHON=1
// (CI sets it).
func python(t *testing.T) string {
	t.Helper()
	var tried []string
	for _, p := range []string{os.Getenv("PGFENCE_PYTHON"), "/usr/bin/python3", "python3"} {
		if p == "" {
			continue
		}
		path, err := exec.LookPath(p)
		if err != nil {
			tried = append(tried, p+": not found")
			continue
		}
		out, err := exec.Command(path, "-c", "try:\n import psycopg\nexcept ImportError:\n import psycopg2").CombinedOutput()
		if err == nil {
			return path
		}
		tried = append(tried, fmt.Sprintf("%s: %s", path, strings.TrimSpace(lastLine(string(out)))))
	}
	needtool.Python.Missing(t, errors.New(strings.Join(tried, "; ")))
	return ""
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// psql runs one psql session on url with the given script on its standard
// input, ON_ERROR_STOP set, unaligned tuples-only output, and returns its
// output.
func psql(t *testing.T, url, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, pgtest.Tool(t, "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", url)
	cmd.Stdin = strings.NewReader(script)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("psql: %v\n%s\n%s", err, out.String(), stderr.String())
	}
	return strings.TrimSpace(out.String())
}
