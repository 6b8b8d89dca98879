package dbenv

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

// ContainerImage is the image dbenv starts when it falls back to Docker.
const ContainerImage = "postgres:16-alpine"

func startContainer(ctx context.Context, log io.Writer) (srv *Server, err error) {
	// Older testcontainers releases panicked when no Docker engine answered;
	// turn any such panic into the error it should have been.
	defer func() {
		if r := recover(); r != nil {
			srv, err = nil, fmt.Errorf("no Docker engine: %v", r)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	started := time.Now()
	c, err := tcpostgres.Run(ctx, ContainerImage,
		tcpostgres.WithDatabase("postgres"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("pgfence"),
		tcpostgres.BasicWaitStrategies(),
	)
	if err != nil {
		if c != nil {
			testcontainers.TerminateContainer(c)
		}
		return nil, err
	}
	url, err := c.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		testcontainers.TerminateContainer(c)
		return nil, err
	}
	fmt.Fprintf(log, "pgfence: started a throwaway PostgreSQL container (%s, %.1fs); it is removed on exit\n",
		ContainerImage, time.Since(started).Seconds())
	return &Server{URL: url, Source: "testcontainers", Throwaway: true,
		stop: func() error { return testcontainers.TerminateContainer(c) }}, nil
}
