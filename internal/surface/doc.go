// Package surface holds a test that counts the exported names of pgfence's
// public packages and fails when they grow past a limit: every exported name
// is something a user must learn and the project must keep for good, so a new
// one has to displace an old one or earn a higher limit in review.
package surface
