// Package validate checks the inputs every pgfence package takes at its
// boundary (keys, owner labels, other stored text, durations, identifiers),
// so that bad input is refused before anything is sent to the database, with
// one wording across packages.
package validate
