package migrations_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/migrations"
)

// Apply the schema at start-up: Up is idempotent and safe to run from
// several instances at once on a direct connection.
func ExampleUp() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	if err := migrations.Up(ctx, pool); err != nil {
		log.Fatal(err)
	}
	st, err := migrations.Inspect(ctx, pool)
	if err != nil {
		log.Fatal(err)
	}
	latest, err := migrations.Latest()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("at the latest version:", st.Version == latest, "dirty:", st.Dirty)
	// Output: at the latest version: true dirty: false
}

// A pgfence of its own in a schema: every client then takes the same
// WithSchema option. Down reverts it independently of other schemas.
func ExampleWithSchema() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	if err := migrations.Up(ctx, pool, migrations.WithSchema("example_fence")); err != nil {
		log.Fatal(err)
	}
	var tables int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables
		WHERE schemaname = 'example_fence' AND tablename IN ('lock_leases', 'pgfence_jobs', 'payout_intents')`).Scan(&tables); err != nil {
		log.Fatal(err)
	}
	fmt.Println("pgfence tables in example_fence:", tables)

	if err := migrations.Down(ctx, pool, migrations.WithSchema("example_fence")); err != nil {
		log.Fatal(err)
	}
	st, err := migrations.Inspect(ctx, pool, migrations.WithSchema("example_fence"))
	fmt.Println("after Down:", st.Version, err)
	// Output:
	// pgfence tables in example_fence: 3
	// after Down: 0 <nil>
}
