package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// bin is the pgfence binary the tests run, built once in TestMain.
var bin string

type buildThenRun struct{ m *testing.M }

func (r buildThenRun) Run() int {
	dir, err := os.MkdirTemp("", "pgfence-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin = filepath.Join(dir, "pgfence")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		return 1
	}
	return r.m.Run()
}

func TestMain(m *testing.M) { pgtest.Main(buildThenRun{m}) }

// result is how one run of the binary ended.
type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

func (r result) String() string {
	return fmt.Sprintf("exit %d after %v\n--- stdout:\n%s--- stderr:\n%s", r.code, r.took.Round(time.Millisecond), r.stdout, r.stderr)
}

// cleanEnv is the environment without any database setting, so that each
// test says which database it means.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name == "DATABASE_URL" || name == "PGFENCE_DATABASE_URL" || strings.HasPrefix(name, "PG") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// pgfence runs the binary with args and extra environment variables.
func pgfence(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = cleanEnv(env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			r.code = exitStatus(ee.ProcessState)
		} else {
			t.Fatalf("pgfence %v: %v", args, err)
		}
	}
	return r
}

func wantCode(t *testing.T, r result, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("want exit %d, got %s", code, r)
	}
}

func randomName(prefix string) string {
	var b [5]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// emptyDatabase creates a database without pgfence's schema and returns
// its URL; it is dropped when the test ends.
func emptyDatabase(t *testing.T) string { return pgtest.BareDatabase(t) }

// withUser returns u with its userinfo replaced.
func withUser(t *testing.T, u, user, password string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	p.User = url.UserPassword(user, password)
	return p.String()
}
