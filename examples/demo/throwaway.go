package main

import (
	"github.com/pgfence/pgfence/examples/internal/throwaway"
	"github.com/pgfence/pgfence/examples/story"
)

// With no server reachable, the demo starts a throwaway one, so that its
// first run needs nothing but the PostgreSQL binaries. Without this file it
// runs like the other examples.
func init() { story.SetFallback(throwaway.Start) }
