package hasuite

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"
)

// verifyOnCluster runs pgfence verify through the clients' multi-host DSN
// with synchronous replication: once undisturbed, once across a switchover.
// Both must pass: a switchover in synchronous mode loses no acknowledged
// write and lets no two holders overlap.
func verifyOnCluster(t *testing.T, c *cluster) {
	bin := c.pgfence(t)
	c.setSync(true)
	t.Run("steady", func(t *testing.T) {
		c.t = t
		runVerify(t, bin, c.dsn(), "3s", nil)
	})
	t.Run("switchover", func(t *testing.T) {
		c.t = t
		leader, tl, err := c.leader()
		if err != nil {
			t.Fatal(err)
		}
		runVerify(t, bin, c.dsn(), "15s", func() {
			time.Sleep(4 * time.Second) // grants flowing on the old primary
			if err := c.switchover(leader, c.switchoverCandidate()); err != nil {
				t.Error(err)
				return
			}
			c.waitNewLeader(leader, tl, 60*time.Second)
		})
		c.rejoin(true)
	})
}

// verifyOutcome is the part of verify --json the suite reads.
type verifyOutcome struct {
	Grants       int            `json:"grants"`
	Errors       int            `json:"errors"`
	ErrorsBy     map[string]int `json:"errors_by_phase"`
	FencedWrites map[string]int `json:"fenced_writes"`
	Checks       []struct {
		Name   string `json:"name"`
		Pass   bool   `json:"pass"`
		Detail string `json:"detail"`
	} `json:"checks"`
	Verdict string `json:"verdict"`
}

// runVerify runs verify for duration on dsn, with fault (if any) running
// meanwhile, and requires a pass.
func runVerify(t *testing.T, bin, dsn, duration string, fault func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "verify", "--json", "--duration", duration, "--database-url", dsn)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	faulted := make(chan struct{})
	go func() {
		defer close(faulted)
		if fault != nil {
			fault()
		}
	}()
	err := cmd.Wait()
	<-faulted
	var out verifyOutcome
	if jerr := json.Unmarshal(stdout.Bytes(), &out); err != nil || jerr != nil || out.Verdict != "PASS" {
		t.Fatalf("pgfence verify: %v (output %v)\n--- stdout:\n%s--- stderr:\n%s", err, jerr, stdout.String(), stderr.String())
	}
	t.Logf("verify: PASS, %d grants, fenced writes %v, %d errors %v", out.Grants, out.FencedWrites, out.Errors, out.ErrorsBy)
}
