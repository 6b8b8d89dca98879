package faultsuite

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The register audit: the database's own record of every update of the
// fenced rows. The register model sees only the writes answered ok, refused
// or ambiguous (a write classified failed is left out of its history) and
// reads taken every 30ms, so a stale write wrongly applied and overwritten
// before the next read would go unseen there. An AFTER UPDATE trigger on the
// rows table appends (seq, k, old fence, new fence) for every update that
// commits; per row, seq order is commit order (the trigger runs under the
// row's lock), and an update that rolls back takes its audit row with it.
// Test setup only, like the lease audit.
const registerAuditDDL = `
CREATE SEQUENCE fs_rows_audit_seq;
CREATE TABLE fs_rows_audit (
  seq       bigint PRIMARY KEY,
  k         text   NOT NULL,
  old_fence bigint NOT NULL,
  new_fence bigint NOT NULL
);
CREATE FUNCTION fs_rows_audit_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO fs_rows_audit (seq, k, old_fence, new_fence)
  VALUES (nextval('fs_rows_audit_seq'), NEW.k, OLD.last_fence, NEW.last_fence);
  RETURN NULL;
END
$$;
CREATE TRIGGER fs_rows_audit AFTER UPDATE ON %s
  FOR EACH ROW EXECUTE FUNCTION fs_rows_audit_row();
`

func installRegisterAudit(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, fmt.Sprintf(registerAuditDDL, pgx.Identifier{rowsTable}.Sanitize()))
	return err
}

// checkRegisterAudit checks that the fence applied to each row never went
// down: per row, in seq (commit) order, every update's new fence is at
// least its old one, and its old fence is the previous update's new one (no
// update missing from the record). It returns how many updates it checked
// and the violations found.
func checkRegisterAudit(ctx context.Context, pool *pgxpool.Pool, keys ...string) (updates int, violations []string, err error) {
	q := `SELECT seq, k, old_fence, new_fence FROM fs_rows_audit`
	args := []any{}
	if len(keys) > 0 {
		q += ` WHERE k = ANY($1)`
		args = append(args, keys)
	}
	rows, err := pool.Query(ctx, q+` ORDER BY k, seq`, args...)
	if err != nil {
		return 0, nil, err
	}
	type update struct {
		seq      int64
		k        string
		old, new int64
	}
	us, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (u update, err error) {
		err = r.Scan(&u.seq, &u.k, &u.old, &u.new)
		return u, err
	})
	if err != nil {
		return 0, nil, err
	}
	for i, u := range us {
		updates++
		if u.new < u.old {
			violations = append(violations, fmt.Sprintf("row %s: applied fence went down: update seq %d wrote fence %d over fence %d",
				u.k, u.seq, u.new, u.old))
		}
		if i > 0 && us[i-1].k == u.k && us[i-1].new != u.old {
			violations = append(violations, fmt.Sprintf("row %s: update seq %d found fence %d, but the previous update (seq %d) left fence %d",
				u.k, u.seq, u.old, us[i-1].seq, us[i-1].new))
		}
	}
	return updates, violations, nil
}

// checkRegisterAuditBites writes a stale fence over a newer one on a row of
// its own with raw SQL, overwrites it at once (as a newer holder would,
// before any read), and requires checkRegisterAudit to report the stale
// write.
func checkRegisterAuditBites(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const key = "fs-control-stale"
	for _, s := range []string{
		`INSERT INTO %s (k) VALUES ($1)`,
		`UPDATE %s SET val = 1, last_fence = 20 WHERE k = $1`,
		`UPDATE %s SET val = 2, last_fence = 10 WHERE k = $1`, // the stale write
		`UPDATE %s SET val = 3, last_fence = 30 WHERE k = $1`, // hides it from any later read
	} {
		if _, err := pool.Exec(ctx, fmt.Sprintf(s, pgx.Identifier{rowsTable}.Sanitize()), key); err != nil {
			t.Fatalf("register audit control: %v", err)
		}
	}
	n, vs, err := checkRegisterAudit(ctx, pool, key)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 || len(vs) != 1 || !strings.Contains(vs[0], "wrote fence 10 over fence 20") {
		t.Errorf("register audit control: want 3 updates checked and the stale write reported, got %d updates checked and %q", n, vs)
		return
	}
	t.Logf("register audit control caught: %s", vs[0])
}
