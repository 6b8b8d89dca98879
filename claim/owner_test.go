package claim_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/claim"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// queryCounter counts the statements a pool sends, to show that refused
// input never reaches the database.
type queryCounter struct{ n atomic.Int64 }

func (q *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	q.n.Add(1)
	return ctx
}

func (q *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestOwnerLabelValidated: claim.New refuses an owner label the database
// cannot store (NUL, invalid UTF-8), an empty or an oversized one with
// pgfence.ErrInvalidInput before any statement is sent (so a Pool can never be built
// on a claimer whose every claim would fail); a valid label is written to
// the claimed rows.
func TestOwnerLabelValidated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	counter := &queryCounter{}
	pool := pgtest.Pool(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = counter })
	for name, label := range map[string]string{
		"NUL":          "own\x00er",
		"invalid UTF8": "own\xffer",
		"empty":        "",
		"257 bytes":    strings.Repeat("o", 257),
	} {
		c, err := claim.New(ctx, pool, claim.WithOwner(label))
		if !errors.Is(err, pgfence.ErrInvalidInput) || c != nil {
			t.Errorf("%s: New = %v, %v; want pgfence.ErrInvalidInput", name, c, err)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	if n := counter.n.Load(); n != 0 {
		t.Fatalf("refused owner labels sent %d statements", n)
	}

	label := strings.Repeat("é", 128) // 256 bytes, the limit
	queue := "owner-" + strings.ReplaceAll(t.Name(), "/", "-")
	c := newClaimer(t, pool, queue, claim.WithOwner(label))
	if counter.n.Load() == 0 {
		t.Fatal("the tracer saw no statement from New: the check above proves nothing")
	}
	id := enqueue(t, pool, claim.NewJob{Queue: queue})
	jobs, err := c.Claim(ctx, 1, time.Minute)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %v, %v", jobs, err)
	}
	var stored string
	if err := pool.QueryRow(ctx, "SELECT owner FROM pgfence_jobs WHERE id = $1", id).Scan(&stored); err != nil || stored != label {
		t.Fatalf("stored owner %q (%v), want %q", stored, err, label)
	}
	if err := c.Complete(ctx, jobs[0]); err != nil {
		t.Fatal(err)
	}
}
