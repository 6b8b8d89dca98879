package advisory_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/advisory"
)

// Scheduled work: every instance tries each tick; the one that gets the key
// does the work, the others skip. The work's writes commit with the lock.
func ExampleTryDo() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS report_runs (day date PRIMARY KEY)`); err != nil {
		log.Fatal(err)
	}

	key, err := advisory.StringKey("report:daily")
	if err != nil {
		log.Fatal(err)
	}
	err = advisory.TryDo(ctx, pool, key, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO report_runs VALUES ('2026-11-30') ON CONFLICT DO NOTHING`)
		return err
	})
	switch {
	case errors.Is(err, pgfence.ErrNotAcquired):
		fmt.Println("another instance is running the report; skipping this tick")
	case err != nil:
		fmt.Println("report failed:", err)
	default:
		fmt.Println("report done")
	}
	// Output: report done
}

// Work that must happen: wait for the key, but not forever.
func ExampleDo() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	err = advisory.Do(ctx, pool, advisory.PairKey(42, 7), func(ctx context.Context, tx pgx.Tx) error {
		var n int
		return tx.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`).Scan(&n)
	})
	fmt.Println("err:", err)
	// Output: err: <nil>
}

// The same key from SQL, for scripts that must exclude the Go workers.
func ExampleKeySQL() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	k, err := advisory.StringKey("invoice:72")
	if err != nil {
		log.Fatal(err)
	}
	err = advisory.Do(ctx, pool, k, func(ctx context.Context, tx pgx.Tx) error {
		// A script's transaction on another connection asks for the key.
		var got bool
		if err := pool.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(`+advisory.KeySQL+`)`, "invoice:72").Scan(&got); err != nil {
			return err
		}
		fmt.Println("the script got the lock:", got)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output: the script got the lock: false
}
