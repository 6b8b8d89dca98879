// Package pgtest gives each test package a fresh, migrated PostgreSQL
// database on the server that dbenv resolves, and removes it afterwards.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// and take pools with pgtest.Pool(t), or with pgtest.SchemaPool(t) for
// empty pgfence tables of the test's own. When no server can be found, Main fails
// the package with dbenv's message: tests never skip for lack of a database.
package pgtest
