package pglease_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgfence/pgfence/internal/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

func TestSmoke(t *testing.T) {
	ctx := context.Background()
	c, err := pglease.New(pgtest.Pool(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.TryAcquire(ctx, "smoke", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("fence", l.Fence())
	if _, err := c.TryAcquire(ctx, "smoke", time.Second); err == nil {
		t.Fatal("second acquire succeeded")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
