// Package metricstest holds the tests of pglease's, claim's and pgguard's
// OpenTelemetry metrics. They read the instruments through the SDK
// (otelxtest), and they live here, in a package no user imports, so that
// the SDK never enters a user's go.sum: go mod tidy keeps checksums for the
// tests of the packages a module imports.
package metricstest
