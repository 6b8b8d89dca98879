package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/validate"
)

// Table finds the ordinary or partitioned table name denotes, with its
// columns: the one lookup of a user's table for every package, so that each
// refuses a missing table or a view in the same words. pkg prefixes the
// errors ("claim", "pgguard", ...); hint, when not empty, is appended to the
// not-found refusal (such as which migrations create the table). A missing
// table and a relation that is not a table are refused with an error that
// satisfies validate.ErrInvalidInput; a failed lookup is returned wrapped.
func Table(ctx context.Context, db fencedb.DBTX, pkg string, name pgx.Identifier, hint string) (*Relation, error) {
	rel, err := Resolve(ctx, db, name)
	switch {
	case errors.Is(err, ErrNotFound):
		where := ""
		if len(name) == 1 {
			where = " in any schema on the search_path"
		}
		if hint != "" {
			hint = "; " + hint
		}
		return nil, validate.Invalid(pkg, "table %s does not exist%s (or this role cannot see it)%s", name.Sanitize(), where, hint)
	case err != nil:
		return nil, fmt.Errorf("%s: looking up table %s: %w", pkg, name.Sanitize(), err)
	case !rel.IsTable():
		return nil, validate.Invalid(pkg, "%s is not a table (relkind %q)", name.Sanitize(), rel.Kind)
	}
	return rel, nil
}
