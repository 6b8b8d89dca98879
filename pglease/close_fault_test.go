package pglease_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// Close against a server gone silent (no answer, no reset) releases a few
// leases at a time, each within its 5 s bound: with 16 leases held it
// returns in about two such bounds, with an error, instead of 16 × 5 s.
func TestCloseSilentServerIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, proxy := pgtest.ProxiedPool(t, func(c *pgxpool.Config) { c.MaxConns = 16 })
	c, err := pglease.New(pool, pglease.WithOwner("close-silent"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 16
	prefix := fmt.Sprintf("close-silent:%d:", time.Now().UnixNano())
	for i := range n {
		if _, err := c.TryAcquire(ctx, fmt.Sprint(prefix, i), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	proxy.Silence()
	defer proxy.Close() // resets what is left, so the pool closes at once
	start := time.Now()
	err = c.Close()
	took := time.Since(start)
	t.Logf("Close took %v: %v", took.Round(time.Millisecond), err)
	if err == nil {
		t.Error("Close reported no error, yet no release reached the server")
	}
	// Two rounds of 8 releases, 5 s each, plus slack for a loaded machine;
	// one release at a time would take 80 s.
	if took > 16*time.Second {
		t.Errorf("Close took %v against a silent server, want about 10 s", took)
	}
	// The leases were not released: they stay held until their TTL, which
	// is safe (the next holder waits).
	var held int
	direct := pgtest.Pool(t)
	if err := direct.QueryRow(ctx, `SELECT count(*) FROM lock_leases WHERE lock_key LIKE $1 AND expires_at > now()`, prefix+"%").Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != n {
		t.Errorf("%d of %d leases still held by the database clock, want all", held, n)
	}
}
