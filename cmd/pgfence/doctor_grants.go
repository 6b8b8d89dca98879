package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/internal/catalog"
	"github.com/pgfence/pgfence/pgguard"
)

// clientRole is the role pgfence's migrations create with what a client
// needs: USAGE on the schema, EXECUTE on pgfence's functions, the reads and
// writes of its tables. Granting it to an application's role is the whole
// setup.
const clientRole = "pgfence_client"

// privilegeFacts is what the privileges finding is judged from, read in one
// statement.
type privilegeFacts struct {
	role, schema, owner string
	superuser           bool
	owns                bool // the role is the schema's owner, or a member of it
	usage               bool // USAGE on the schema
	clientExists        bool // the role pgfence_client exists
	member              bool // the role has pgfence_client's privileges
}

const privilegeFactsSQL = `SELECT current_user::text, r.rolsuper, coalesce(pg_get_userbyid(n.nspowner)::text, ''),
       coalesce(pg_has_role(current_user, n.nspowner, 'USAGE'), false),
       coalesce(has_schema_privilege(current_user, n.oid, 'USAGE'), false),
       c.oid IS NOT NULL, coalesce(pg_has_role(current_user, c.oid, 'USAGE'), false)
  FROM pg_roles AS r
  LEFT JOIN pg_namespace AS n ON n.nspname = $1
  LEFT JOIN pg_roles AS c ON c.rolname = $2
 WHERE r.rolname = current_user`

// privilegeRule is one verdict on the facts: the first rule whose when
// holds decides. One line adds a rule.
type privilegeRule struct {
	when   func(privilegeFacts) bool
	status doctorStatus
	title  func(privilegeFacts) string
	do     func(privilegeFacts) string
}

func grantClient(f privilegeFacts) string {
	return fmt.Sprintf("GRANT %s TO %s", clientRole, quoteIdent(f.role))
}

var privilegeRules = []privilegeRule{
	{func(f privilegeFacts) bool { return f.superuser }, statusOK,
		func(f privilegeFacts) string { return fmt.Sprintf("role %s is a superuser", quoteIdent(f.role)) }, nil},
	{func(f privilegeFacts) bool { return f.owns }, statusOK,
		func(f privilegeFacts) string {
			return fmt.Sprintf("role %s owns pgfence's schema %s (owner %s)", quoteIdent(f.role), quoteIdent(f.schema), quoteIdent(f.owner))
		}, nil},
	{func(f privilegeFacts) bool { return f.member }, statusOK,
		func(f privilegeFacts) string {
			return fmt.Sprintf("role %s is a member of %s", quoteIdent(f.role), clientRole)
		}, nil},
	{func(f privilegeFacts) bool { return !f.usage }, statusFail,
		func(f privilegeFacts) string {
			return fmt.Sprintf("role %s has no USAGE on pgfence's schema %s: every pgfence call is refused", quoteIdent(f.role), quoteIdent(f.schema))
		},
		func(f privilegeFacts) string {
			if f.clientExists {
				return grantClient(f)
			}
			return fmt.Sprintf("%s, then %s (the schema predates that role); or, on this schema, GRANT USAGE ON SCHEMA %s TO %s "+
				"and EXECUTE on its pgfence_* functions, DML on its tables", "pgfence migrate up", grantClient(f), quoteIdent(f.schema), quoteIdent(f.role))
		}},
	{func(f privilegeFacts) bool { return !f.clientExists }, statusWarn,
		func(f privilegeFacts) string {
			return fmt.Sprintf("no role %s: the schema predates the client role, so the grants role %s needs cannot be checked at once", clientRole, quoteIdent(f.role))
		},
		func(f privilegeFacts) string {
			return "pgfence migrate up (on a direct connection), then " + grantClient(f)
		}},
	{func(privilegeFacts) bool { return true }, statusFail,
		func(f privilegeFacts) string {
			return fmt.Sprintf("role %s is neither the schema's owner nor a member of %s", quoteIdent(f.role), clientRole)
		}, grantClient},
}

func checkPrivileges(ctx context.Context, d *doctor) error {
	if d.schema == "" {
		return nil
	}
	f := privilegeFacts{schema: d.schema}
	err := d.db().QueryRow(ctx, privilegeFactsSQL, d.schema, clientRole).
		Scan(&f.role, &f.superuser, &f.owner, &f.owns, &f.usage, &f.clientExists, &f.member)
	if err != nil {
		return d.readFailed("privileges", "the role's privileges", err)
	}
	read := fmt.Sprintf("current_user %s, superuser %v, schema %s owned by %s, USAGE %v, role %s exists %v, member %v",
		quoteIdent(f.role), f.superuser, quoteIdent(f.schema), quoteIdent(f.owner), f.usage, clientRole, f.clientExists, f.member)
	for _, r := range privilegeRules {
		if r.when(f) {
			out := finding{Check: "privileges", Status: r.status, Title: r.title(f), Read: read}
			if r.do != nil {
				out.Do = r.do(f)
			}
			d.add(out)
			return nil
		}
	}
	return nil
}

// checkTriggers checks each --table for pgfence's fencing trigger, as
// pgguard.InstallTrigger creates it.
func checkTriggers(ctx context.Context, d *doctor) error {
	for _, name := range d.opts.tables {
		if err := d.checkTrigger(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

func (d *doctor) checkTrigger(ctx context.Context, name string) error {
	parts, _ := splitTable(name) // checked when the flag was parsed
	f := finding{Check: "trigger", Status: statusFail}
	rel, err := catalog.Resolve(ctx, d.pool, pgx.Identifier(parts))
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		f.Title = fmt.Sprintf("table %s does not exist", pgx.Identifier(parts).Sanitize())
		f.Read = "no such relation (an unqualified name is looked up through the search_path)"
		f.Do = "check the name: --table SCHEMA.TABLE, names as stored (case-sensitive)"
		d.add(f)
		return nil
	case err != nil:
		return d.readFailed("trigger", "table "+name, err)
	case !rel.IsTable():
		f.Title, f.Read = fmt.Sprintf("%s is not a table", rel.Display), "pg_class.relkind "+rel.Kind
		d.add(f)
		return nil
	}
	var enabled, function string
	err = d.db().QueryRow(ctx, `SELECT t.tgenabled::text, p.proname::text FROM pg_trigger AS t JOIN pg_proc AS p ON p.oid = t.tgfoid
	 WHERE t.tgrelid = $1 AND t.tgname = $2`, rel.OID, pgguard.TriggerName).Scan(&enabled, &function)
	if errors.Is(err, pgx.ErrNoRows) {
		f.Title = fmt.Sprintf("table %s has no fencing trigger: stale holders' writes are not refused by the database", rel.Display)
		f.Read = fmt.Sprintf("no trigger %s on %s", pgguard.TriggerName, rel.Display)
		f.Do = d.installTrigger(rel)
		d.add(f)
		return nil
	}
	if err != nil {
		return d.readFailed("trigger", "the triggers of "+rel.Display, err)
	}
	args, _, err := catalog.TriggerArgs(ctx, d.pool, rel, pgguard.TriggerName)
	if err != nil {
		return d.readFailed("trigger", "the triggers of "+rel.Display, err)
	}
	f.Read = fmt.Sprintf("trigger %s on %s: function %s(%s), tgenabled %s", pgguard.TriggerName, rel.Display, function, strings.Join(args, ", "), enabled)
	switch {
	case function != "pgfence_enforce_fence":
		f.Title = fmt.Sprintf("the trigger %s on %s is not pgfence's: it calls %s", pgguard.TriggerName, rel.Display, function)
		f.Do = d.installTrigger(rel)
	case enabled == "D" || enabled == "R":
		f.Title = fmt.Sprintf("the fencing trigger on %s is disabled: stale holders' writes are not refused", rel.Display)
		f.Do = fmt.Sprintf("ALTER TABLE %s ENABLE TRIGGER %s", rel.Quoted(), pgguard.TriggerName)
	default:
		mode := "?"
		if len(args) > 0 {
			mode = args[0]
		}
		f.Status, f.Title = statusOK, fmt.Sprintf("table %s has the fencing trigger, enabled, %s mode", rel.Display, mode)
	}
	d.add(f)
	return nil
}

// installTrigger is what installs the fencing trigger on rel: the Go call,
// and the SQL pgguard.TriggerMigration writes for it (with the fence column
// first, when the table lacks it).
func (d *doctor) installTrigger(rel *catalog.Relation) string {
	t := pgguard.Table{Schema: rel.Schema, Name: rel.Name}
	var opts []pgguard.Option
	goOpts := ""
	if d.schema != "" {
		opts = append(opts, pgguard.WithSchema(d.schema))
		goOpts = fmt.Sprintf(", pgguard.WithSchema(%q)", d.schema)
	}
	do := fmt.Sprintf("in Go: pgguard.InstallTrigger(ctx, pool, pgguard.Table{Schema: %q, Name: %q}, pgguard.Strict%s); or in SQL:", rel.Schema, rel.Name, goOpts)
	if _, ok := rel.Column("last_fence"); !ok {
		col, _, err := pgguard.FenceColumnMigration(t)
		if err == nil {
			do += "\n" + strings.TrimSpace(col)
		}
	}
	up, _, err := pgguard.TriggerMigration(t, pgguard.Strict, opts...)
	if err != nil {
		return do + " (" + err.Error() + ")"
	}
	return do + "\n" + strings.TrimSpace(up)
}
