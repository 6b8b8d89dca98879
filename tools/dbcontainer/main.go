// Command dbcontainer starts a throwaway PostgreSQL container for pgfence's
// tests and examples, prints its URL, and removes the container when it is
// told to stop. It is the tests' last resort, for a machine with a Docker
// engine but no PostgreSQL binaries: it lives in a module of its own so that
// testcontainers-go and the Docker SDK never enter pgfence's go.mod, the CLI
// binary, or a user's go.sum.
//
// By hand, from a checkout of pgfence, in a terminal of its own:
//
//	go run -C tools/dbcontainer .
//
// It prints PGFENCE_DATABASE_URL=<url> on stdout (and the export line to
// copy on stderr) and keeps the container until Ctrl-C (SIGINT) or SIGTERM.
// internal/testsupport/dbenv runs it the same way with -stdin, which also stops it when
// its standard input closes, so the container goes away with the test
// process that started it, even if that process is killed.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

// image is the PostgreSQL image started.
const image = "postgres:16-alpine"

func main() {
	untilEOF := flag.Bool("stdin", false, "also stop when standard input closes (how internal/testsupport/dbenv runs it)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *untilEOF {
		go func() {
			io.Copy(io.Discard, os.Stdin)
			stop()
		}()
	}
	if err := run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "dbcontainer: %v\n", err)
		os.Exit(1)
	}
}

// run starts the container, announces its URL and holds it until ctx ends.
func run(ctx context.Context) error {
	c, url, err := start(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err := testcontainers.TerminateContainer(c); err != nil {
			fmt.Fprintf(os.Stderr, "dbcontainer: removing the container: %v\n", err)
			return
		}
		fmt.Fprintln(os.Stderr, "dbcontainer: the container was removed")
	}()
	fmt.Printf("PGFENCE_DATABASE_URL=%s\n", url)
	fmt.Fprintf(os.Stderr, "dbcontainer: PostgreSQL is ready. In another shell:\n\n"+
		"  export PGFENCE_DATABASE_URL='%s'\n  go test -race -count=1 ./...\n\n"+
		"Ctrl-C here stops and removes the container.\n", url)
	<-ctx.Done()
	return nil
}

// start runs the container and returns it with its URL.
func start(ctx context.Context) (testcontainers.Container, string, error) {
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	c, err := tcpostgres.Run(sctx, image,
		tcpostgres.WithDatabase("postgres"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("pgfence"),
		tcpostgres.BasicWaitStrategies(),
	)
	if err != nil {
		if c != nil {
			testcontainers.TerminateContainer(c)
		}
		return nil, "", fmt.Errorf("starting %s (is a Docker engine running?): %w", image, err)
	}
	url, err := c.ConnectionString(sctx, "sslmode=disable")
	if err != nil {
		testcontainers.TerminateContainer(c)
		return nil, "", err
	}
	return c, url, nil
}
