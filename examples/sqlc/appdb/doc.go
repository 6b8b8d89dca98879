// Package appdb is the sqlc-generated query code of the sqlc example's app
// (queries.sql over schema.sql and pgfence's migrations). Every other file
// here is generated: edit queries.sql or schema.sql and run, from the
// repository's root,
//
//	go tool -modfile=tools/go.mod sqlc generate -f examples/sqlc/sqlc.yaml
package appdb
