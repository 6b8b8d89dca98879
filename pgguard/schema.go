package pgguard

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/catalog"
	"github.com/pgfence/pgfence/internal/pgdb"
)

// Enforcement is how a table's fencing trigger treats an UPDATE or DELETE
// from a transaction that set no fence, named as the trigger's argument
// ("strict" or "lenient"). There is no default: choose one.
type Enforcement string

const (
	// Strict refuses an UPDATE or DELETE from a transaction without a fence,
	// with SQLSTATE PF002 (ErrNoFence after Classify): every change to an
	// existing row must come from a fenced transaction. For a one-off manual
	// fix, an operator sets a fresh fence, in the transaction that writes,
	// which also locks out every current holder:
	//	SELECT pgfence_set_fence(pgfence_next_fence());
	Strict Enforcement = "strict"
	// Lenient lets an UPDATE or DELETE from a transaction without a fence
	// through (writers that know nothing of fences keep working), but such
	// an UPDATE cannot change the row's fence. Writes that carry a fence are
	// checked exactly as in Strict mode, and in both modes a pgfence.fence
	// that the transaction did not set with pgfence_set_fence (a
	// session-level SET, a plain set_config) is refused, SQLSTATE PF003:
	// a writer that sets a fence means to be fenced, and treating its fence
	// as absent would let its stale writes through without a word.
	Lenient Enforcement = "lenient"
)

// TriggerName is the name of the fencing trigger that InstallTrigger puts on
// a table.
const TriggerName = "pgfence_fence_guard"

// SetFence sets the fence of the transaction tx, bound to tx: SELECT
// pgfence_set_fence(fence). The fencing trigger compares
// it with the fence column of every row an UPDATE or DELETE touches,
// whatever SQL issued it, and accepts it only in the transaction that set it:
// it ends with tx, and no session-level setting can stand in for it. A Guard's
// Update and ClaimFirst set it too, to the fence they were given, so call it
// again after them if you mix fences in one transaction (you should not).
//
// A fence above the highest one pgfence's source has issued is refused with
// ErrFenceAboveCeiling; pass WithOwnFenceSource when your fences come from a
// source of your own (the only option SetFence reads).
func SetFence(ctx context.Context, tx pgx.Tx, fence int64, opts ...Option) error {
	if tx == nil {
		return invalid("nil transaction")
	}
	if fence <= 0 {
		return invalid("fence must be positive, got %d", fence)
	}
	o, err := buildOptions(opts, callSetFence)
	if err != nil {
		return err
	}
	return setFence(ctx, tx, fence, &o)
}

func setFence(ctx context.Context, tx pgx.Tx, fence int64, o *options) error {
	if _, err := pgdb.Wrap(tx, "").Exec(ctx, "SELECT "+o.setFenceCall("$1"), fence); err != nil {
		return fmt.Errorf("pgguard: setting the transaction's fence: %w", pgdb.Hint(Classify(err), o.schema))
	}
	return nil
}

// Beginner starts transactions: a *pgxpool.Pool, a *pgx.Conn, or a pgx.Tx
// (which starts a savepoint).
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// RunFenced runs fn in a transaction whose fence is set (SetFence, with the
// same options) and commits it when fn returns nil; otherwise it rolls back. Errors are
// classified (see Classify) and stale-fence refusals counted, so a raw UPDATE
// in fn that a fencing trigger refused comes back as a *StaleFenceError.
func RunFenced(ctx context.Context, db Beginner, fence int64, fn func(tx pgx.Tx) error, opts ...Option) error {
	if db == nil || fn == nil {
		return invalid("RunFenced needs a database and a function")
	}
	if fence <= 0 {
		return invalid("fence must be positive, got %d", fence)
	}
	o, err := buildOptions(opts, callRunFenced)
	if err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := setFence(ctx, tx, fence, &o); err != nil {
			return err
		}
		return fn(tx)
	})
	return o.observe(ctx, err)
}

// FenceColumnMigration returns the SQL of a migration (up and down) that adds
// the fence column (bigint NOT NULL DEFAULT 0) to one of the caller's
// tables, for a migration tool of your own, or to apply directly with
// pool.Exec(ctx, up). Adding it is instant on PostgreSQL 11 and later (no
// table rewrite), and up does nothing when the column exists; NewGuard and
// InstallTrigger refuse one that is not bigint NOT NULL. The names are
// checked as NewGuard checks them (but not against a catalog) and quoted.
// t.KeyColumn is not used.
func FenceColumnMigration(t Table) (up, down string, err error) {
	if err := t.check(false); err != nil {
		return "", "", err
	}
	tbl, col := t.ident().Sanitize(), pgx.Identifier{t.fenceColumn()}.Sanitize()
	up = fmt.Sprintf("-- pgguard: the fence of the newest holder that wrote each row.\nALTER TABLE %s ADD COLUMN IF NOT EXISTS %s bigint NOT NULL DEFAULT 0;\n", tbl, col)
	down = fmt.Sprintf("ALTER TABLE %s DROP COLUMN IF EXISTS %s;\n", tbl, col)
	return up, down, nil
}

// InstallTrigger puts the fencing trigger on t (replacing one already there,
// atomically): a BEFORE UPDATE OR DELETE row trigger named
// pgfence_fence_guard calling
// pgfence_enforce_fence() from pgfence's migrations. Then, whatever SQL
// issued it, an UPDATE or DELETE of a row is
//
//   - refused with SQLSTATE PF001 when the transaction's fence (SetFence) is
//     older than the row's fence column: a stale holder, even one whose
//     hand-written statement forgot the fence predicate;
//   - in Strict mode, refused with SQLSTATE PF002 when the transaction set
//     no fence; in Lenient mode let through;
//   - otherwise allowed. The trigger owns the fence column: whatever an
//     UPDATE wrote to it, the row's fence becomes the greater of its old
//     value and the transaction's fence. A fenced UPDATE stamps its fence on
//     the row; no UPDATE lowers a row's fence, or raises it past the fence
//     its transaction holds (which would lock legitimate holders out).
//
// The transaction's fence counts only in the transaction that set it with
// pgfence_set_fence (SetFence, RunFenced, a Guard): an UPDATE or
// DELETE under a pgfence.fence set any other way (a session-level SET, which
// would outlive its transaction and, on a pooled connection, vouch for other
// clients; a plain set_config) is refused in both modes with SQLSTATE PF003
// (ErrNoFence after Classify).
//
// Tables that inherit from t (INHERITS, at any depth) get the trigger too,
// in the same transaction: UPDATE t and DELETE FROM t reach their rows, and
// a row trigger on t does not fire for them. A child created later is not
// covered until InstallTrigger runs on t again (it is idempotent) or on the
// child; run it after every CREATE TABLE ... INHERITS. Partitions need
// nothing: PostgreSQL puts a partitioned table's trigger on every partition,
// present and future.
//
// INSERTs are not checked (a new row has no holder yet), nor is TRUNCATE,
// which fires no row triggers. The fence column must exist as bigint NOT
// NULL (FenceColumnMigration). t.KeyColumn is not used. Classify turns the
// trigger's errors into ErrStaleFence and ErrNoFence.
func InstallTrigger(ctx context.Context, db pgfence.DBTX, t Table, mode Enforcement, opts ...Option) error {
	if mode != Strict && mode != Lenient {
		return invalid("mode must be Strict or Lenient, got %q", string(mode))
	}
	o, err := buildOptions(opts, callTrigger)
	if err != nil {
		return err
	}
	r, err := lookupTable(ctx, db, t)
	if err != nil {
		return err
	}
	if err := r.fenceColumn(t.fenceColumn()); err != nil {
		return err
	}
	children, err := inheritors(ctx, db, r)
	if err != nil {
		return err
	}
	// One simple-protocol Exec: every statement runs in one implicit
	// transaction, so no table is ever left without a trigger.
	var sql strings.Builder
	for _, tbl := range append([]string{r.quoted()}, children...) {
		sql.WriteString(triggerSQL(tbl, t.fenceColumn(), mode, o.fn))
	}
	if _, err := pgdb.Wrap(db, "").Exec(ctx, sql.String()); err != nil {
		return fmt.Errorf("pgguard: installing the fencing trigger on %s (did pgfence's migrations run?): %w", r.quoted(), pgdb.Hint(err, o.schema))
	}
	return nil
}

// inheritors returns the tables that inherit from r through INHERITS, at any
// depth: UPDATE and DELETE on r reach their rows, but they get nothing from
// r's triggers, so each needs the fencing trigger of its own.
func inheritors(ctx context.Context, db pgfence.DBTX, r *resolved) ([]string, error) {
	children, err := catalog.Inheritors(ctx, db, r.rel)
	if err != nil {
		return nil, fmt.Errorf("pgguard: reading the tables that inherit from %s: %w", r.quoted(), err)
	}
	return children, nil
}

// fn is the schema prefix of pgfence_enforce_fence (WithSchema): the trigger
// names its function once, when it is created, so it keeps calling that
// schema's function whatever the search_path of the sessions that write.
func triggerSQL(quotedTable, fenceColumn string, mode Enforcement, fn string) string {
	// fenceColumn passed checkIdent: it holds no quote or backslash, so it
	// is a safe string literal.
	return fmt.Sprintf("DROP TRIGGER IF EXISTS %s ON %s;\n"+
		"CREATE TRIGGER %s BEFORE UPDATE OR DELETE ON %s FOR EACH ROW EXECUTE FUNCTION %spgfence_enforce_fence('%s', '%s');\n",
		TriggerName, quotedTable, TriggerName, quotedTable, fn, mode, fenceColumn)
}

// RemoveTrigger takes the fencing trigger off t and off every table that
// inherits from it, where they have one, atomically.
func RemoveTrigger(ctx context.Context, db pgfence.DBTX, t Table) error {
	r, err := lookupTable(ctx, db, t)
	if err != nil {
		return err
	}
	children, err := inheritors(ctx, db, r)
	if err != nil {
		return err
	}
	var sql strings.Builder
	for _, tbl := range append([]string{r.quoted()}, children...) {
		fmt.Fprintf(&sql, "DROP TRIGGER IF EXISTS %s ON %s;\n", TriggerName, tbl)
	}
	if _, err := pgdb.Wrap(db, "").Exec(ctx, sql.String()); err != nil {
		return fmt.Errorf("pgguard: removing the fencing trigger from %s: %w", r.quoted(), err)
	}
	return nil
}

// TriggerEnforcement reports the enforcement of t's fencing trigger; ok is
// false when t has no fencing trigger.
func TriggerEnforcement(ctx context.Context, db pgfence.DBTX, t Table) (mode Enforcement, ok bool, err error) {
	r, err := lookupTable(ctx, db, t)
	if err != nil {
		return "", false, err
	}
	args, ok, err := catalog.TriggerArgs(ctx, db, r.rel, TriggerName)
	if err != nil {
		return "", false, fmt.Errorf("pgguard: reading the fencing trigger of %s: %w", r.quoted(), err)
	}
	if !ok {
		return "", false, nil
	}
	for _, mode := range []Enforcement{Strict, Lenient} {
		if len(args) > 0 && args[0] == string(mode) {
			return mode, true, nil
		}
	}
	return "", false, fmt.Errorf("pgguard: the trigger %s on %s has unexpected arguments %q", TriggerName, r.quoted(), args)
}

// TriggerMigration returns the SQL of a migration (up and down) that installs
// the fencing trigger on t, for a migration tool of your own; see
// InstallTrigger. It covers t alone: it sees no catalog, so it cannot know
// t's INHERITS children; generate one for each of them too. It needs pgfence's migrations to have run first. The names
// are checked (but not against a catalog) and quoted. WithSchema names
// pgfence's schema, as for InstallTrigger.
func TriggerMigration(t Table, mode Enforcement, opts ...Option) (up, down string, err error) {
	if mode != Strict && mode != Lenient {
		return "", "", invalid("mode must be Strict or Lenient, got %q", string(mode))
	}
	o, err := buildOptions(opts, callTrigger)
	if err != nil {
		return "", "", err
	}
	if err := t.check(false); err != nil {
		return "", "", err
	}
	tbl := t.ident().Sanitize()
	up = "-- pgguard: database-enforced fencing (" + string(mode) + " mode).\n" + triggerSQL(tbl, t.fenceColumn(), mode, o.fn)
	down = fmt.Sprintf("DROP TRIGGER IF EXISTS %s ON %s;\n", TriggerName, tbl)
	return up, down, nil
}

// lookupTable validates t's names (the key column is not needed) and finds
// the table in the catalog through db: the common start of the schema
// helpers.
func lookupTable(ctx context.Context, db pgfence.DBTX, t Table) (*resolved, error) {
	if db == nil {
		return nil, invalid("nil DBTX")
	}
	if err := t.check(false); err != nil {
		return nil, err
	}
	return resolve(ctx, db, t)
}
