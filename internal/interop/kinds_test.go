package interop

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgfence/pgfence/pglease"
)

// pyTake starts a Python client that takes key once in kind (with n
// permits) and holds it until the test ends; it returns its answer:
// "granted SLOT FENCE", "held" or "error SQLSTATE".
func pyTake(t *testing.T, py, url, kind, key string, n int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	cmd := exec.CommandContext(ctx, py, filepath.Join("testdata", "holder.py"), url, "take", kind, key, fmt.Sprint(n))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
		cancel()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil && err != io.EOF {
		t.Fatal(err)
	}
	if line == "" {
		t.Fatalf("python %s %s: no answer; stderr: %s", kind, key, stderr.String())
	}
	return strings.TrimSpace(line)
}

// A key is one lock across languages: Python takes a shared lease beside a
// Go one and a permit beside a Go permit, and is kept out, as held or with
// SQLSTATE PF007, by a Go holder of a kind that excludes its own; psql is
// kept out the same way.
func TestKindsAcrossLanguages(t *testing.T) {
	py := python(t)
	url, pool := database(t)
	ctx := context.Background()
	c, err := pglease.New(pool, pglease.WithOwner("go"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	shared, err := c.TryAcquire(ctx, "report", 30*time.Second, pglease.Shared())
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Release(ctx)
	if got := pyTake(t, py, url, "shared", "report", 0); !strings.HasPrefix(got, "granted ") {
		t.Fatalf("python shared beside a Go shared lease: %q, want granted", got)
	}
	if got := pyTake(t, py, url, "plain", "report", 0); got != "held" {
		t.Fatalf("python plain lease of a key held shared: %q, want held", got)
	}
	if got := pyTake(t, py, url, "permit", "report", 2); got != "error PF007" {
		t.Fatalf("python permit of a key held shared: %q, want error PF007", got)
	}

	permit, err := c.TryAcquire(ctx, "devices", 30*time.Second, pglease.Permits(2))
	if err != nil {
		t.Fatal(err)
	}
	defer permit.Release(ctx)
	got := pyTake(t, py, url, "permit", "devices", 2)
	var slot int
	var fence int64
	if _, err := fmt.Sscanf(got, "granted %d %d", &slot, &fence); err != nil || slot == permit.Slot() || fence <= permit.Fence() {
		t.Fatalf("python permit beside a Go permit of 2: %q (Go's slot %d, fence %d)", got, permit.Slot(), permit.Fence())
	}
	if got := pyTake(t, py, url, "permit", "devices", 2); got != "held" {
		t.Fatalf("a third permit of 2 from python: %q, want held", got)
	}
	if got := pyTake(t, py, url, "shared", "devices", 0); got != "error PF007" {
		t.Fatalf("python shared lease of a key held as permits: %q, want error PF007", got)
	}
	if _, err := c.TryAcquire(ctx, "devices", time.Second); err == nil {
		t.Fatal("a Go plain lease of a key held as permits by Go and Python")
	}

	plain, err := c.TryAcquire(ctx, "export", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Release(ctx)
	for _, kind := range []string{"plain", "shared", "permit"} {
		if got := pyTake(t, py, url, kind, "export", 3); got != "held" {
			t.Fatalf("python %s of a key Go holds plain: %q, want held", kind, got)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pgfence_acquire_shared('export', false, '1 s', 'psql')`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("a shared lease from SQL of a key Go holds plain: %d rows, %v", n, err)
	}
}
