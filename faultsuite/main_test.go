package faultsuite

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/pgfence/pgfence/faultsuite/internal/worker"
	"github.com/pgfence/pgfence/internal/testsupport/dbenv"
)

// TestMain doubles as the worker's main: the suite starts its workers by
// re-executing this test binary with worker.EnvID set, so no separate build
// is needed and the workers run with the same flags (-race included).
func TestMain(m *testing.M) {
	if os.Getenv(worker.EnvID) != "" {
		os.Exit(worker.Main())
	}
	code := m.Run()
	if cluster != nil {
		cluster.Remove()
	}
	os.Exit(code)
}

var (
	clusterOnce sync.Once
	cluster     *dbenv.Cluster
	clusterErr  error
)

// theCluster starts the suite's own throwaway cluster once: the suite
// crash-restarts it, so it cannot share the one other packages use, and it
// ignores PGFENCE_DATABASE_URL for the same reason.
func theCluster(t *testing.T) *dbenv.Cluster {
	t.Helper()
	clusterOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c, err := dbenv.NewCluster(5441)
		if err != nil {
			clusterErr = fmt.Errorf("the fault suite needs local PostgreSQL server binaries (initdb, postgres), "+
				"since it crash-restarts its server: %w", err)
			return
		}
		if err := c.InitDB(ctx); err != nil {
			c.Remove()
			clusterErr = err
			return
		}
		if err := c.Start(ctx, nil); err != nil {
			c.Remove()
			clusterErr = err
			return
		}
		cluster = c
	})
	if clusterErr != nil {
		t.Fatal(clusterErr)
	}
	return cluster
}
