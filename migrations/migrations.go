package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/golang-migrate/migrate/v4"
	pgxmigrate "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// Table is the table in which golang-migrate records pgfence's schema version.
const Table = "pgfence_schema_migrations"

//go:embed *.sql
var files embed.FS

// FS returns the migration files (NNNNNN_name.up.sql / .down.sql).
func FS() fs.FS { return files }

// Up applies every migration not yet applied. A database already at the
// newest version is not an error.
func Up(ctx context.Context, pool *pgxpool.Pool) error {
	return run(ctx, pool, "up", func(m *migrate.Migrate) error { return m.Up() })
}

// Down reverts every migration: it drops pgfence's tables, functions and the
// fence sequence. Fences issued afterwards start again from the bottom, so only
// do this when nothing still holds a fence from this database.
func Down(ctx context.Context, pool *pgxpool.Pool) error {
	return run(ctx, pool, "down", func(m *migrate.Migrate) error { return m.Down() })
}

// Version reports the applied schema version. A database on which pgfence's
// migrations never ran reports version 0 and no error. dirty means a migration
// failed half-way and needs a person: see golang-migrate's "force".
func Version(ctx context.Context, pool *pgxpool.Pool) (version uint, dirty bool, err error) {
	err = run(ctx, pool, "version", func(m *migrate.Migrate) error {
		var verr error
		version, dirty, verr = m.Version()
		return verr
	})
	return version, dirty, err
}

// Latest is the newest schema version these files define.
func Latest() (uint, error) {
	src, err := iofs.New(files, ".")
	if err != nil {
		return 0, err
	}
	defer src.Close()
	v, err := src.First()
	if err != nil {
		return 0, err
	}
	for {
		next, err := src.Next(v)
		if errors.Is(err, fs.ErrNotExist) {
			return v, nil
		}
		if err != nil {
			return 0, err
		}
		v = next
	}
}

func run(ctx context.Context, pool *pgxpool.Pool, what string, fn func(*migrate.Migrate) error) error {
	if pool == nil {
		return errors.New("pgfence migrations: nil pool")
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	driver, err := pgxmigrate.WithInstance(db, &pgxmigrate.Config{MigrationsTable: Table})
	if err != nil {
		return fmt.Errorf("pgfence migrations: connect: %w", err)
	}
	src, err := iofs.New(files, ".")
	if err != nil {
		return fmt.Errorf("pgfence migrations: read embedded files: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", driver)
	if err != nil {
		return fmt.Errorf("pgfence migrations: %w", err)
	}
	defer m.Close()

	// golang-migrate takes no context; ask it to stop between migrations
	// when ours ends.
	stop := context.AfterFunc(ctx, func() { m.GracefulStop <- true })
	defer stop()

	err = fn(m)
	switch {
	case err == nil, errors.Is(err, migrate.ErrNoChange), errors.Is(err, migrate.ErrNilVersion):
		return ctx.Err()
	default:
		return fmt.Errorf("pgfence migrations: %s: %w", what, err)
	}
}
