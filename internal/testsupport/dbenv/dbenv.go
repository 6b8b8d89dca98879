package dbenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Server is a PostgreSQL server that dbenv found or started.
type Server struct {
	// URL connects to the server's "postgres" database (or to the database
	// the explicit URL names).
	URL string
	// Source says where the server came from, for messages: the environment
	// variable's name, "local binaries in DIR" or "a container
	// (tools/dbcontainer)".
	Source string
	// Throwaway is true when dbenv started the server and Close removes it.
	Throwaway bool

	stop func() error
}

// Close stops and removes a server that dbenv started; for an explicit URL it
// does nothing.
func (s *Server) Close() error {
	if s == nil || s.stop == nil {
		return nil
	}
	stop := s.stop
	s.stop = nil
	return stop()
}

// URLFromEnv returns the explicit database URL, if one is set, and the name
// of the variable that set it.
func URLFromEnv() (url, variable string) {
	for _, name := range []string{"PGFENCE_DATABASE_URL", "DATABASE_URL"} {
		if v := strings.TrimSpace(os.Getenv(name)); v != "" {
			return v, name
		}
	}
	return "", ""
}

// Open resolves a server in the package's order. Progress for humans (which
// source was chosen, how long a start took) is written to log, which may be
// nil.
func Open(ctx context.Context, log io.Writer) (*Server, error) {
	if log == nil {
		log = io.Discard
	}
	if url, name := URLFromEnv(); url != "" {
		return &Server{URL: url, Source: name}, nil
	}

	var reasons []string
	srv, err := startLocal(ctx, log)
	if err == nil {
		return srv, nil
	}
	reasons = append(reasons, "local PostgreSQL binaries: "+err.Error())

	srv, err = startContainer(ctx, log)
	if err == nil {
		return srv, nil
	}
	reasons = append(reasons, "a container ("+containerTool+"): "+err.Error())

	return nil, fmt.Errorf("pgfence: no PostgreSQL server to use.\n"+
		"  Tried, in order:\n    - PGFENCE_DATABASE_URL and DATABASE_URL: not set\n    - %s\n"+
		"  Provide one of:\n"+
		"    - export PGFENCE_DATABASE_URL=postgres://user@127.0.0.1:5432/dbname (a server you run)\n"+
		"    - install PostgreSQL's server binaries (Debian/Ubuntu: apt-get install postgresql)\n"+
		"    - start a Docker engine: the tests then run %s themselves;\n"+
		"      or run it by hand in a terminal of its own and export the URL it prints:\n"+
		"        %s",
		strings.Join(reasons, "\n    - "), containerTool, containerHowTo)
}

var errNotFound = errors.New("not found")
