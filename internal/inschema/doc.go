// Package inschema points pgfence's statements at the pgfence objects of a
// schema chosen per client, by rewriting each
// statement's schema markers (/* TEMPLATE: schema */, see internal/sqltmpl)
// before it is sent. The names travel in the statement text, not in a
// search_path, so the rewrite is per client, holds no session state and
// works behind a transaction pooler (PgBouncer), where a search_path startup
// parameter is refused or dropped.
//
// Wrap takes any fencedb.DBTX (compose it with pgmode.Wrap, in either
// order). Each distinct statement text is expanded once per schema and
// cached, so a statement costs one map lookup; with no schema Wrap returns
// its argument and costs nothing. The cache never evicts: wrap only
// statements from a fixed set (fencedb's constants), never text built per
// call.
package inschema
