package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	pgxmigrate "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgfence/pgfence/internal/pgdb"
)

// Table is the table in which golang-migrate records pgfence's schema version.
const Table = "pgfence_schema_migrations"

//go:embed *.sql
var files embed.FS

// FS returns the migration files (NNNNNN_name.up.sql / .down.sql), plain
// SQL, for running with a tool of one's own: psql, golang-migrate's CLI
// (with x-migrations-table=pgfence_schema_migrations, so that pgfence
// migrate and Version see what it applied), or any other. Each file puts
// pgfence's objects into the current schema of the session that runs it.
func FS() fs.FS { return files }

// Up applies every migration not yet applied. A database already at the
// newest version is not an error. A schema that holds pgfence's objects but
// no record of a version (applied by another tool that keeps its own
// record) is refused with ErrUnrecorded before anything runs.
func Up(ctx context.Context, pool *pgxpool.Pool, opts ...Option) error {
	if pool == nil {
		return errors.New("pgfence migrations: nil pool")
	}
	st, err := Inspect(ctx, pool, opts...)
	if err != nil && !errors.Is(err, ErrNoSuchSchema) {
		return err
	}
	if err == nil && st.AppliedElsewhere() {
		return &unrecordedError{State: st}
	}
	return run(ctx, pool, "up", opts, func(m *migrate.Migrate) error { return m.Up() })
}

// Down reverts every migration: it drops pgfence's tables, functions and the
// fence sequence. Fences issued afterwards start again from the bottom, so only
// do this when nothing still holds a fence from this database.
func Down(ctx context.Context, pool *pgxpool.Pool, opts ...Option) error {
	return run(ctx, pool, "down", opts, func(m *migrate.Migrate) error { return m.Down() })
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

// ErrBehindPooler: the pool reaches the server through a connection pooler.
// golang-migrate serialises instances with a session-level advisory lock,
// which a transaction pooler (PgBouncer, pool_mode = transaction) hands to
// other clients' transactions, so instances hang or collide there.
var ErrBehindPooler = errors.New("pgfence migrations: the connection goes through a connection pooler " +
	"(the server's backend pid differs from the one the connection announced); golang-migrate holds a " +
	"session-level lock there: run migrations on a direct connection to PostgreSQL")

// Force sets the recorded schema version to version and clears the dirty
// flag, without running any migration, as golang-migrate's "force" does. Use
// it after checking by hand what a failed migration left behind; version -1
// records that no migration is applied.
func Force(ctx context.Context, pool *pgxpool.Pool, version int, opts ...Option) error {
	return run(ctx, pool, "force", opts, func(m *migrate.Migrate) error { return m.Force(version) })
}

// run opens golang-migrate on connections of its own (same settings as pool,
// not taken from it) and runs fn. Every connection it opened is closed when
// run returns, whatever happened: golang-migrate's WithInstance keeps the
// connection it took when it fails (for example while waiting for its lock),
// which would otherwise stay open holding a session lock, and, taken from
// pool, would make pool.Close block forever. When ctx ends, the connections
// are cancelled and closed, so that a wait for golang-migrate's lock (which
// takes no context) ends with it.
func run(ctx context.Context, pool *pgxpool.Pool, what string, opts []Option, fn func(*migrate.Migrate) error) (err error) {
	if pool == nil {
		return errors.New("pgfence migrations: nil pool")
	}
	o, err := collect(opts)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pgfence migrations: %s: %w", what, err)
	}
	conns := &tracked{}
	defer conns.closeAll(false)
	stopOnCancel := context.AfterFunc(ctx, func() { conns.closeAll(true) })
	defer stopOnCancel()
	connCfg := pool.Config().ConnConfig // a copy: ours to change
	if o.schema != "" {
		connCfg.RuntimeParams["search_path"] = quote(o.schema)
		conns.schema = o.schema
		conns.create = what == "up"
	}
	db := stdlib.OpenDB(*connCfg, stdlib.OptionAfterConnect(conns.add))
	defer db.Close()
	defer func() {
		if ctx.Err() != nil && err != nil && !errors.Is(err, ErrBehindPooler) {
			err = fmt.Errorf("pgfence migrations: %s: %w (%v)", what, ctx.Err(), err)
		}
	}()

	driver, err := pgxmigrate.WithInstance(db, &pgxmigrate.Config{MigrationsTable: Table})
	if err != nil {
		if errors.Is(err, ErrBehindPooler) {
			return ErrBehindPooler
		}
		if errors.Is(err, ErrNoSuchSchema) {
			return fmt.Errorf("%w: %q (migrate up with this schema first)", ErrNoSuchSchema, o.schema)
		}
		return fmt.Errorf("pgfence migrations: connect: %w", unwrapDB(err))
	}
	src, err := iofs.New(files, ".")
	if err != nil {
		driver.Close()
		return fmt.Errorf("pgfence migrations: read embedded files: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", driver)
	if err != nil {
		driver.Close()
		return fmt.Errorf("pgfence migrations: %w", err)
	}
	defer m.Close()

	// golang-migrate takes no context; ask it to stop between migrations
	// when ours ends.
	stop := context.AfterFunc(ctx, func() {
		select {
		case m.GracefulStop <- true:
		default:
		}
	})
	defer stop()

	err = fn(m)
	switch {
	case err == nil, errors.Is(err, migrate.ErrNoChange), errors.Is(err, migrate.ErrNilVersion):
		if ctx.Err() != nil {
			return fmt.Errorf("pgfence migrations: %s: %w", what, ctx.Err())
		}
		return nil
	default:
		if what == "up" {
			undirty(m)
		}
		return fmt.Errorf("pgfence migrations: %s: %w", what, unwrapDB(err))
	}
}

// undirty clears the dirty flag a failed Up left, when that is safe. Each
// migration file runs as one multi-statement query, which PostgreSQL runs in
// one implicit transaction (the files have no BEGIN or COMMIT of their own):
// a failure left nothing of it behind, so the version before it is the truth.
func undirty(m *migrate.Migrate) {
	v, dirty, err := m.Version()
	if err != nil || !dirty {
		return
	}
	src, err := iofs.New(files, ".")
	if err != nil {
		return
	}
	defer src.Close()
	prev, err := src.Prev(v)
	switch {
	case err == nil:
		m.Force(int(prev))
	case errors.Is(err, fs.ErrNotExist):
		m.Force(-1) // the first migration failed: none is applied
	}
}

// DBError is a failed statement of a migration: the server's error, without
// the migration's SQL text that golang-migrate attaches to it.
type DBError struct {
	Err  error  // the server's error (a *pgconn.PgError when it answered)
	Line uint   // line of the migration file, when known
	What string // golang-migrate's summary, e.g. "migration failed"
}

// Error names what failed and the database error.
func (e *DBError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s (line %d): %v", e.What, e.Line, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.What, e.Err)
}

// Unwrap returns the database error.
func (e *DBError) Unwrap() error { return e.Err }

// unwrapDB replaces golang-migrate's database.Error, whose message carries
// the whole SQL file and which hides the server's error from errors.As, with
// a DBError.
func unwrapDB(err error) error {
	var de database.Error
	if errors.As(err, &de) && de.OrigErr != nil {
		what := de.Err
		if what == "" {
			what = "statement failed"
		}
		return &DBError{Err: de.OrigErr, Line: de.Line, What: what}
	}
	return err
}

// tracked records the connections golang-migrate opens, so that run can end
// them all.
type tracked struct {
	schema string // pgfence's schema, "" for the default layout
	create bool   // create schema when it is missing (Up)

	mu     sync.Mutex
	conns  []*pgx.Conn
	closed bool
}

// add is the AfterConnect hook: it refuses a connection that goes through a
// pooler (PgBouncer answers with a backend key of its own, so the pid the
// connection announced is not the server's) and records the others. A
// connection it refuses is closed here: pgx's stdlib connector drops it
// without closing it, and it is not recorded for closeAll, so it would keep
// a server session (or a pooler's client slot) until garbage collection.
func (t *tracked) add(ctx context.Context, c *pgx.Conn) error {
	err := t.admit(ctx, c)
	if err != nil {
		c.PgConn().Conn().Close()
	}
	return err
}

func (t *tracked) admit(ctx context.Context, c *pgx.Conn) error {
	behind, err := pgdb.BehindPooler(ctx, c)
	if err != nil {
		return err
	}
	if behind {
		return ErrBehindPooler
	}
	if err := t.ensureSchema(ctx, c); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return errors.New("pgfence migrations: finished")
	}
	t.conns = append(t.conns, c)
	return nil
}

// closeAll ends every recorded connection by closing its socket, which is
// safe while another goroutine uses the connection (pgx's own Close is not)
// and ends the server session with whatever lock it holds. With cancel, it
// first asks the server to cancel what each one runs (a lock wait does not
// notice a closed socket).
func (t *tracked) closeAll(cancel bool) {
	t.mu.Lock()
	conns := t.conns
	t.conns, t.closed = nil, true
	t.mu.Unlock()
	for _, c := range conns {
		if cancel {
			ctx, stop := context.WithTimeout(context.Background(), 3*time.Second)
			c.PgConn().CancelRequest(ctx)
			stop()
		}
		c.PgConn().Conn().Close()
	}
}
