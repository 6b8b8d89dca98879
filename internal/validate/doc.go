// Package validate checks the inputs every pgfence package takes at its
// boundary (keys, durations), so that bad input is refused before anything is
// sent to the database, with one wording across packages.
package validate
