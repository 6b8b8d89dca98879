package fencedb_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/fencedb"
)

// The lease statements as generated functions: what package pglease sends,
// for code that drives leases itself. Each runs in its own short transaction
// (here: autocommit), since expiry is judged by the transaction's now().
func ExampleQueries_Acquire() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	q := fencedb.New(pool)
	ttl := (30 * time.Second).Microseconds()

	// The owner token is random and at least 128 bits: it settles an
	// acquisition whose answer was lost (FindByOwnerToken).
	first, err := q.Acquire(ctx, fencedb.AcquireParams{LockKey: "fencedb:example", Owner: "worker-1", OwnerToken: "4f1c0a7e9b2d4c6e8a0b1c2d3e4f5a6b", TtlMicros: ttl})
	if err != nil {
		log.Fatal(err)
	}
	_, err = q.Acquire(ctx, fencedb.AcquireParams{LockKey: "fencedb:example", Owner: "worker-2", OwnerToken: "9a8b7c6d5e4f30211203948576a6b7c8", TtlMicros: ttl})
	fmt.Println("second owner refused:", errors.Is(err, pgx.ErrNoRows))

	_, err = q.Renew(ctx, fencedb.RenewParams{LockKey: "fencedb:example", Fence: first.Fence, TtlMicros: ttl})
	fmt.Println("renewed:", err == nil)
	released, err := q.Release(ctx, fencedb.ReleaseParams{LockKey: "fencedb:example", Fence: first.Fence})
	fmt.Println("released:", released, err)
	_, err = q.Renew(ctx, fencedb.RenewParams{LockKey: "fencedb:example", Fence: first.Fence, TtlMicros: ttl})
	fmt.Println("renew after release refused:", errors.Is(err, pgx.ErrNoRows))
	// Output:
	// second owner refused: true
	// renewed: true
	// released: true <nil>
	// renew after release refused: true
}

// pgfence's queries and your own in one transaction: read the lease and make
// the guarded write it allows, committed together.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `
DROP TABLE IF EXISTS reports;
CREATE TABLE reports (id text PRIMARY KEY, body text, last_fence bigint NOT NULL DEFAULT 0);
INSERT INTO reports (id) VALUES ('daily');`); err != nil {
		log.Fatal(err)
	}
	granted, err := fencedb.New(pool).Acquire(ctx, fencedb.AcquireParams{
		LockKey: "report:daily", Owner: "reporter", OwnerToken: "0123456789abcdef0123456789abcdef", TtlMicros: (time.Minute).Microseconds()})
	if err != nil {
		log.Fatal(err)
	}

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		lease, err := fencedb.New(tx).GetLease(ctx, "report:daily")
		if err != nil {
			return err
		}
		fmt.Println("held:", lease.Held, "by", lease.Owner)
		tag, err := tx.Exec(ctx, `UPDATE reports SET body = 'ok', last_fence = $1
			WHERE id = 'daily' AND last_fence <= $1`, lease.Fence)
		fmt.Println("rows written:", tag.RowsAffected())
		return err
	})
	if err != nil {
		log.Fatal(err)
	}

	// A fence from the same source, for work that takes no lease: larger
	// than every fence issued before it.
	next, err := fencedb.New(pool).NextFence(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("next fence is larger:", next > granted.Fence)
	if _, err := fencedb.New(pool).Release(ctx, fencedb.ReleaseParams{LockKey: "report:daily", Fence: granted.Fence}); err != nil {
		log.Fatal(err)
	}
	// Output:
	// held: true by reporter
	// rows written: 1
	// next fence is larger: true
}
