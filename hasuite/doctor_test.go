package hasuite

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pgfence builds cmd/pgfence into the cluster's directory the first time
// it is asked, for the suite's runs of doctor and verify.
func (c *cluster) pgfence(t *testing.T) string {
	t.Helper()
	if c.bin == "" {
		bin := filepath.Join(c.base.Dir, "pgfence")
		if out, err := exec.Command("go", "build", "-o", bin, "../cmd/pgfence").CombinedOutput(); err != nil {
			t.Fatalf("go build ../cmd/pgfence: %v\n%s", err, out)
		}
		c.bin = bin
	}
	return c.bin
}

// doctorFinding is the part of doctor --json the suite reads.
type doctorFinding struct {
	Check, Status, Title, Read, Do string
}

// runDoctor runs pgfence doctor --json on the cluster's DSN, with the
// leader's Patroni REST API when patroni is set, and returns its exit code
// and replication finding.
func runDoctor(t *testing.T, c *cluster, patroni bool) (int, doctorFinding) {
	t.Helper()
	args := []string{"doctor", "--json", "--database-url", c.dsn()}
	if patroni {
		leader, _, err := c.leader()
		if err != nil {
			t.Fatal(err)
		}
		args = append(args, "--patroni", leader.api())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.pgfence(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var rep struct{ Findings []doctorFinding }
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("pgfence doctor --json: %v\n--- stdout:\n%s--- stderr:\n%s", err, stdout.String(), stderr.String())
	}
	for _, f := range rep.Findings {
		if f.Check == "replication" {
			t.Logf("doctor (patroni %v): exit %d; replication %s: %s; read: %s", patroni, code, f.Status, f.Title, f.Read)
			return code, f
		}
	}
	t.Fatalf("pgfence doctor printed no replication finding:\n%s", stdout.String())
	return 0, doctorFinding{}
}

// doctorOnCluster runs pgfence doctor on the cluster as it starts
// (asynchronous: Patroni's synchronous_mode off), where the replication
// finding must warn with docs/failover.md's recommendation, and again with
// synchronous_mode and synchronous_mode_strict on, where it must be ok.
// Both with and without --patroni. It leaves the cluster synchronous.
func doctorOnCluster(t *testing.T, c *cluster) {
	c.setSync(false)
	t.Run("async", func(t *testing.T) {
		c.t = t
		for _, patroni := range []bool{false, true} {
			code, f := runDoctor(t, c, patroni)
			if code != 1 || f.Status != "warn" || !strings.Contains(f.Do, "synchronous_mode: true and synchronous_mode_strict: true") ||
				!strings.Contains(f.Do, "docs/failover.md") {
				t.Errorf("asynchronous (patroni %v): exit %d, replication %+v", patroni, code, f)
			}
		}
	})
	c.setSync(true)
	t.Run("sync-strict", func(t *testing.T) {
		c.t = t
		for _, patroni := range []bool{false, true} {
			code, f := runDoctor(t, c, patroni)
			if code != 0 || f.Status != "ok" || !strings.Contains(f.Title, "synchronous") {
				t.Errorf("synchronous, strict (patroni %v): exit %d, replication %+v", patroni, code, f)
			}
			if patroni && !strings.Contains(f.Title, "strict") {
				t.Errorf("with --patroni the finding should say strict: %+v", f)
			}
		}
	})
}
