package pgdb

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/internal/pgerr"
	"github.com/pgfence/pgfence/internal/sqltmpl"
)

// Expand is the statement sql for schema (sql itself for ""), from the cache
// Wrap uses: for statements sent some other way (a pgx.Batch).
func Expand(sql, schema string) (string, error) {
	if schema == "" {
		return sql, nil
	}
	return expand(sql, schema)
}

// Hint returns err as a *MissingError when it says that an object of
// pgfence's is missing (undefined table or function, or no such schema: a
// function call names it first) and schema is set; err itself otherwise.
func Hint(err error, schema string) error {
	if err == nil || schema == "" || !(pgerr.IsUndefined(err) || pgerr.Is(err, pgerrcode.InvalidSchemaName)) {
		return err
	}
	return &MissingError{Schema: schema, Err: err}
}

// MissingError: a statement met no pgfence object in Schema, which was never
// migrated, or not to this version. Its message says what to run.
type MissingError struct {
	Schema string
	Err    error // the server's error
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("%v (pgfence's objects are missing from schema %q: run `pgfence migrate up --schema %s` or migrations.Up with migrations.WithSchema)",
		e.Err, e.Schema, e.Schema)
}

func (e *MissingError) Unwrap() error { return e.Err }

// PrivilegeError: a statement on pgfence's objects was refused for want of a
// privilege, or met no pgfence object because the schema that holds them is
// not usable by this role: the role is not a member of pgfence_client.
// Its message says what to run.
type PrivilegeError struct {
	Role   string // the role the connection logged in as; "" when unknown
	Schema string // the schema, when known
	Err    error  // the server's error
}

func (e *PrivilegeError) Error() string {
	role, grantee := "this role", "<role>"
	if e.Role != "" {
		role, grantee = fmt.Sprintf("role %q", e.Role), e.Role
		if !plainName.MatchString(e.Role) {
			grantee = pgx.Identifier{e.Role}.Sanitize()
		}
	}
	where := ""
	if e.Schema != "" {
		where = fmt.Sprintf(" on schema %q", e.Schema)
	}
	return fmt.Sprintf("%s lacks pgfence's client privileges%s: as a superuser or a role with CREATEROLE run GRANT pgfence_client TO %s (%v)",
		role, where, grantee, e.Err)
}

func (e *PrivilegeError) Unwrap() error { return e.Err }

// plainName is a role name that SQL reads as written, without quotes.
var plainName = regexp.MustCompile(`^[a-z_][a-z0-9_$]*$`)

// hintFor is Hint, and a *PrivilegeError for a refusal for want of a
// privilege on one of pgfence's objects, or for a function or table that the
// search_path did not find because the schema holding pgfence's objects is
// not usable by the role (PostgreSQL leaves such a schema out of the path).
// c is the connection the statement ran on, still held (nil when unknown);
// db is the wrapped DBTX; both only say the role, on the error path.
func hintFor(err error, schema string, c *pgxpool.Conn, db DBTX) error {
	if err == nil {
		return nil
	}
	if pgerr.IsPermissionDenied(err) && onPgfenceObject(err) {
		return &PrivilegeError{Role: roleOf(c, db), Schema: schema, Err: err}
	}
	if schema == "" && c != nil && pgerr.IsUndefined(err) {
		if s := unusableSchema(c); s != "" {
			return &PrivilegeError{Role: roleOf(c, db), Schema: s, Err: err}
		}
	}
	return Hint(err, schema)
}

// onPgfenceObject: the refusal names pgfence's schema, one of its tables,
// sequences or functions, or a column (a column privilege is refused as
// "permission denied for table").
func onPgfenceObject(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	what, ok := strings.CutPrefix(pe.Message, "permission denied for ")
	if !ok {
		return false
	}
	kind, name, _ := strings.Cut(what, " ")
	return kind == "schema" || strings.HasPrefix(name, "pgfence_") || name == "lock_leases" || name == "payout_intents"
}

// unusableSchema names a schema of the connection's search_path that holds
// pgfence's fence sequence and that the role may not use, "" when there is
// none (or the question fails).
func unusableSchema(c *pgxpool.Conn) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var s string
	err := c.QueryRow(ctx, unusableSchemaSQL, Mode).Scan(&s)
	if err != nil {
		return ""
	}
	return s
}

const unusableSchemaSQL = `
SELECT n.nspname::text
  FROM pg_catalog.pg_namespace AS n
 WHERE n.nspname IN (SELECT pg_catalog.btrim(p, ' "')
                       FROM pg_catalog.unnest(pg_catalog.string_to_array(pg_catalog.current_setting('search_path'), ',')) AS p)
   AND NOT pg_catalog.has_schema_privilege(n.oid, 'USAGE')
   AND EXISTS (SELECT FROM pg_catalog.pg_class AS c WHERE c.relnamespace = n.oid AND c.relname = 'pgfence_fence_seq')
 LIMIT 1`

// roleOf is the role the connection logged in as, "" when unknown.
func roleOf(c *pgxpool.Conn, db DBTX) string {
	if c != nil {
		return c.Conn().Config().User
	}
	switch v := db.(type) {
	case *pgxpool.Pool:
		return v.Config().ConnConfig.User
	case *pgx.Conn:
		return v.Config().User
	case interface{ Conn() *pgx.Conn }:
		return v.Conn().Config().User
	}
	return ""
}

// expansions holds the expanded statements: (schema, sql text) → expanded
// text, one lookup per statement. The statements are pgfence's own
// constants, a bounded set, so it never evicts.
var expansions sync.Map

type expansion struct{ schema, sql string }

func expand(sql, schema string) (string, error) {
	k := expansion{schema, sql}
	if s, ok := expansions.Load(k); ok {
		return s.(string), nil
	}
	t, err := sqltmpl.Parse(sql)
	if err != nil {
		return "", err
	}
	s, err := t.Expand(sqltmpl.Names{Schema: schema})
	if err != nil {
		return "", err
	}
	expansions.Store(k, s)
	return s, nil
}
