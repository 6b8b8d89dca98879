// Package dsn resolves the PostgreSQL connection string that pgfence's
// command-line tools use, and keeps its password out of everything they
// print.
//
// Redaction works at two levels. Redact rewrites a connection string for
// display (URL userinfo passwords, password= and sslpassword= values).
// Because errors from drivers and URL parsers can quote the connection string
// in forms Redact does not recognise (a malformed URL is quoted verbatim by
// net/url), a Scrubber also replaces every known secret (the password as
// written, percent-decoded, and from PGPASSWORD) wherever it appears; tools
// wrap their output streams with it.
package dsn
