// Package guardopts hands the settings of pgguard's options to a package
// that takes those options and runs statements of its own on a guarded
// table (payouts), so that it needs no options of its own for the same
// settings and pgguard no exported accessors for them.
package guardopts

import "context"

// Settings are what a list of pgguard options sets, as NewGuard reads it.
type Settings struct {
	// Schema of pgfence's functions (pgguard.WithSchema), "" for the
	// search_path.
	Schema string
	// OwnFenceSource: the fence ceiling is not checked
	// (pgguard.WithOwnFenceSource).
	OwnFenceSource bool
	// Caught counts err when it is a *pgguard.StaleFenceError caught outside
	// the Guard's own calls, and calls the stale hook with it, as the Guard
	// does for its own.
	Caught func(ctx context.Context, err error)
}

// Read applies opts (a []pgguard.Option) as NewGuard does and returns their
// settings, or the error NewGuard would return for them. pgguard sets it
// when it is initialized, so it is set wherever pgguard's options can be
// made.
var Read func(opts any) (Settings, error)
