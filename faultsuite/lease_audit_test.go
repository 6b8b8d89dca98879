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

// The lease audit: the database's own record of every version of every
// lock_leases row, so that mutual exclusion itself is checked, not only the
// fences the workers were told about (checkGrants) or the writes they made
// (the register model). Without it, an Acquire that granted over a live
// lease went unnoticed as long as the fences it drew still rose.
//
// An AFTER INSERT OR UPDATE trigger on lock_leases appends each new row
// version (seq, lock_key, fence, acquired_at, expires_at) to
// fs_lease_audit. The trigger runs inside the writing transaction, while it
// holds the row's lock (or, for an insert, the key's unique-index entry),
// and every write to one key waits for that lock: so per key, seq order is
// commit order. A write that rolls back, or whose commit a crash loses,
// takes its audit row with it (the same transaction, the same WAL). A row
// the sweep deletes is not recorded; the next insert of the key is judged
// against the last version before the delete. The trigger and its table are
// test setup only: the migrations do not have them.
const leaseAuditDDL = `
CREATE SEQUENCE fs_lease_audit_seq;
CREATE TABLE fs_lease_audit (
  seq         bigint      PRIMARY KEY,
  lock_key    text        NOT NULL,
  fence       bigint      NOT NULL,
  acquired_at timestamptz NOT NULL,
  expires_at  timestamptz NOT NULL
);
CREATE FUNCTION fs_lease_audit_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO fs_lease_audit (seq, lock_key, fence, acquired_at, expires_at)
  VALUES (nextval('fs_lease_audit_seq'), NEW.lock_key, NEW.fence, NEW.acquired_at, NEW.expires_at);
  RETURN NULL;
END
$$;
CREATE TRIGGER fs_lease_audit AFTER INSERT OR UPDATE ON lock_leases
  FOR EACH ROW EXECUTE FUNCTION fs_lease_audit_row();
`

func installLeaseAudit(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, leaseAuditDDL)
	return err
}

type leaseVersion struct {
	seq               int64
	key               string
	fence             int64
	acquired, expires time.Time
}

// checkLeaseAudit checks mutual exclusion on the recorded lease row
// versions of the given keys (every key if none is given): per key, in seq
// (commit) order, where the fence changes from one version to the next, a
// new lease was granted, and then the new fence must be higher and the new
// version's acquired_at (the granting transaction's now()) must be no
// earlier than the previous version's expires_at (the last expiry the
// previous holder's lease had, after its renewals or its release). It
// returns how many grants it checked this way and the violations found.
func checkLeaseAudit(ctx context.Context, pool *pgxpool.Pool, keys ...string) (grants int, violations []string, err error) {
	q := `SELECT seq, lock_key, fence, acquired_at, expires_at FROM fs_lease_audit`
	args := []any{}
	if len(keys) > 0 {
		q += ` WHERE lock_key = ANY($1)`
		args = append(args, keys)
	}
	rows, err := pool.Query(ctx, q+` ORDER BY lock_key, seq`, args...)
	if err != nil {
		return 0, nil, err
	}
	vs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (v leaseVersion, err error) {
		err = r.Scan(&v.seq, &v.key, &v.fence, &v.acquired, &v.expires)
		return v, err
	})
	if err != nil {
		return 0, nil, err
	}
	const ts = "15:04:05.000000"
	for i := 1; i < len(vs); i++ {
		prev, cur := vs[i-1], vs[i]
		if prev.key != cur.key || prev.fence == cur.fence {
			continue // the key's first version, or a renewal or release of the same lease
		}
		grants++
		if cur.fence < prev.fence {
			violations = append(violations, fmt.Sprintf("%s: fence went down: fence %d (seq %d) granted after fence %d (seq %d)",
				cur.key, cur.fence, cur.seq, prev.fence, prev.seq))
		}
		if cur.acquired.Before(prev.expires) {
			violations = append(violations, fmt.Sprintf("%s: overlapping leases: fence %d granted at %s (seq %d) while fence %d was held until %s (seq %d), %s early",
				cur.key, cur.fence, cur.acquired.UTC().Format(ts), cur.seq, prev.fence, prev.expires.UTC().Format(ts), prev.seq,
				prev.expires.Sub(cur.acquired)))
		}
	}
	return grants, violations, nil
}

// checkLeaseAuditBites injects violations of mutual exclusion with raw SQL
// on keys of its own, after the run, and requires checkLeaseAudit to report
// each: the check is known to fail when it should.
func checkLeaseAuditBites(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	grant := `INSERT INTO lock_leases (lock_key, owner, owner_token, fence, acquired_at, expires_at)
	          VALUES ($1, 'fs-control', $1 || '-1', pgfence_next_fence(), now(), now() + interval '1 hour')`
	cases := []struct {
		key, want string
		sql       []string
	}{
		{"fs-control-overlap", "overlapping leases", []string{grant,
			// A second grant, with a higher fence, over the live lease.
			`UPDATE lock_leases SET owner_token = lock_key || '-2', fence = pgfence_next_fence(), acquired_at = now(),
			        expires_at = now() + interval '1 hour' WHERE lock_key = $1`}},
		{"fs-control-resurrect", "overlapping leases", []string{grant,
			// The live row deleted (as no sweep would) and the key granted again.
			`DELETE FROM lock_leases WHERE lock_key = $1`,
			`INSERT INTO lock_leases (lock_key, owner, owner_token, fence, acquired_at, expires_at)
			 VALUES ($1, 'fs-control', $1 || '-2', pgfence_next_fence(), now(), now() + interval '1 hour')`}},
		{"fs-control-down", "fence went down", []string{grant,
			// Released, then granted again under a lower fence.
			`UPDATE lock_leases SET expires_at = now() - interval '1 minute' WHERE lock_key = $1`,
			`UPDATE lock_leases SET owner_token = lock_key || '-2', fence = fence - 1, acquired_at = now(),
			        expires_at = now() + interval '1 hour' WHERE lock_key = $1`}},
	}
	for _, c := range cases {
		for _, s := range c.sql {
			if _, err := pool.Exec(ctx, s, c.key); err != nil {
				t.Fatalf("control %s: %v", c.key, err)
			}
		}
		n, vs, err := checkLeaseAudit(ctx, pool, c.key)
		if err != nil {
			t.Fatal(err)
		}
		if n != 1 || len(vs) != 1 || !strings.Contains(vs[0], c.want) {
			t.Errorf("lease audit control %s: want 1 grant checked and one %q violation, got %d grants checked and %q", c.key, c.want, n, vs)
			continue
		}
		t.Logf("lease audit control %s caught: %s", c.key, vs[0])
	}
}
