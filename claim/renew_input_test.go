package claim_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// Renew on a Job built by hand (no TTL: only Claim sets it) is refused with
// pgfence.ErrInvalidInput and sends nothing: before, it set expires_at = now() and
// so ended the lease it meant to extend. Renew on the claimed Job still
// extends the lease by its TTL, and Complete takes the hand-built Job.
func TestRenewRefusesAJobWithoutTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	qn := queue("renewttl")
	c := newClaimer(t, pool, qn)
	id := enqueue(t, pool, claim.NewJob{Queue: qn})
	j := claimOne(t, c, time.Minute)

	var before time.Time
	if err := pool.QueryRow(ctx, `SELECT expires_at FROM pgfence_jobs WHERE id = $1`, id).Scan(&before); err != nil {
		t.Fatal(err)
	}
	built := &claim.Job{ID: j.ID, Fence: j.Fence}
	err := c.Renew(ctx, built)
	if !errors.Is(err, pgfence.ErrInvalidInput) || !strings.Contains(err.Error(), "returned by Claim") {
		t.Fatalf("Renew of a hand-built job: %v, want pgfence.ErrInvalidInput saying to use the Job from Claim", err)
	}
	var after time.Time
	var live bool
	if err := pool.QueryRow(ctx, `SELECT expires_at, expires_at > now() FROM pgfence_jobs WHERE id = $1`, id).Scan(&after, &live); err != nil {
		t.Fatal(err)
	}
	if !after.Equal(before) || !live {
		t.Fatalf("expires_at %v -> %v (live %v): the refused Renew changed the lease", before, after, live)
	}
	if row := getJob(t, pool, id); row.state != "running" || row.fence == nil || *row.fence != j.Fence {
		t.Fatalf("job %+v, want still running under fence %d", row, j.Fence)
	}

	if err := c.Renew(ctx, j); err != nil {
		t.Fatalf("Renew of the claimed job: %v", err)
	}
	if ttl := time.Until(j.Deadline()); ttl < 50*time.Second {
		t.Fatalf("after Renew the local deadline is %v away, want about the 1m TTL", ttl)
	}
	if err := c.Complete(ctx, built); err != nil {
		t.Fatalf("Complete of the hand-built job: %v", err)
	}
	if row := getJob(t, pool, id); row.state != "completed" {
		t.Fatalf("job %+v, want completed", row)
	}
}
