package pglease_test

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
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// queryCounter counts the statements a pool sends, to show that refused
// input never reaches the database.
type queryCounter struct{ n atomic.Int64 }

func (q *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	q.n.Add(1)
	return ctx
}

func (q *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestOwnerLabelValidated: an owner label the database cannot store (NUL,
// invalid UTF-8) or that is empty or oversized is refused by New with
// pgfence.ErrInvalidInput, before any statement is sent; a 256-byte multi-byte
// label is stored as it is.
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
		c, err := pglease.New(pool, pglease.WithOwner(label))
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
	c := newClient(t, pool, pglease.WithOwner(label))
	key := uniqueKey(t)
	l, err := c.TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	var stored string
	if err := pool.QueryRow(ctx, "SELECT owner FROM lock_leases WHERE lock_key = $1", key).Scan(&stored); err != nil || stored != label {
		t.Fatalf("stored owner %q (%v), want %q", stored, err, label)
	}
}
