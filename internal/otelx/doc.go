// Package otelx holds what pglease, claim and pgguard share for their
// OpenTelemetry metrics: the meter of a package, attribute sets turned into
// measurement options once, and the observable instruments of a pgxpool.
// It imports only the OpenTelemetry API, never the SDK: the user brings it.
// The instruments are documented in docs/metrics.md.
//
// The tests that drive the instruments through the SDK live in package
// metricstest, so that the SDK never enters the go.sum of a module that
// imports pglease, claim or pgguard (go mod tidy keeps checksums for the
// tests of imported packages); otelxtest holds their reader helpers.
package otelx
