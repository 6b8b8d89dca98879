package throwaway

import (
	"context"
	"io"

	"github.com/pgfence/pgfence/examples/story"
	"github.com/pgfence/pgfence/internal/testsupport/dbenv"
)

// Start starts a throwaway server; its Close stops and removes it. story
// calls it only when no database URL is set, so dbenv.Open starts one
// instead of returning a URL from the environment.
func Start(ctx context.Context, log io.Writer) (*story.Server, error) {
	srv, err := dbenv.Open(ctx, log)
	if err != nil {
		return nil, err
	}
	return &story.Server{ConnString: srv.URL, Source: "a throwaway PostgreSQL (" + srv.Source + ")", Close: srv.Close}, nil
}
