package interop

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// docExample extracts the fenced code block of docs/sql.md that starts
// with first (its shebang line) and writes it to a file.
func docExample(t *testing.T, first string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "sql.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "\n"+first+"\n")
	body, _, closed := strings.Cut(rest, "\n```\n")
	if !ok || !closed {
		t.Fatalf("docs/sql.md has no code block starting with %q", first)
	}
	path := filepath.Join(t.TempDir(), "example")
	if err := os.WriteFile(path, []byte(first+"\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// The psql/bash and Python examples of docs/sql.md behave like pgfence
// exec: the command runs holding the key, sees its fence and outlives the
// TTL through renewals; a second run on the held key exits 81; the key is
// released at the end; a lease released from elsewhere stops the command,
// exit 83.
func TestDocExamples(t *testing.T) {
	psqlDir := filepath.Dir(pgtest.Tool(t, "psql"))
	t.Run("bash", func(t *testing.T) {
		t.Parallel()
		bash, err := exec.LookPath("bash")
		if err != nil {
			t.Fatal("bash is not on PATH")
		}
		exampleLikeExec(t, []string{bash, docExample(t, "#!/usr/bin/env bash")}, psqlDir)
	})
	t.Run("python", func(t *testing.T) {
		t.Parallel()
		py := python(t)
		exampleLikeExec(t, []string{py, docExample(t, "#!/usr/bin/env python3")}, psqlDir)
	})
}

func exampleLikeExec(t *testing.T, example []string, psqlDir string) {
	url, pool := database(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := goClient(t, pool)
	env := append(os.Environ(), "DATABASE_URL="+url, "PATH="+psqlDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	start := func(key string, args ...string) (*exec.Cmd, *strings.Builder) {
		cmd := exec.CommandContext(ctx, example[0], append(append(example[1:], key, "6"), args...)...)
		cmd.Env = env
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, &out
	}
	waitHeld := func(key string) pglease.Holder {
		for ctx.Err() == nil {
			if h, ok, err := c.Holder(ctx, key); err == nil && ok && h.Held {
				return h
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("%s was never held", key)
		return pglease.Holder{}
	}
	code := func(err error) int {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	}

	// Holds the key across its 6 s TTL while the command runs 9 s. (A TTL
	// of 6 s renewed every 2 s rides out a few seconds' stall of a loaded
	// machine, which a 3 s one did not.)
	cmd, out := start("doc:run", "sh", "-c", `echo "fence=$PGFENCE_FENCE key=$PGFENCE_KEY"; sleep 9`)
	h := waitHeld("doc:run")
	second, secondOut := start("doc:run", "true")
	if rc := code(second.Wait()); rc != 81 {
		t.Fatalf("a second run on the held key exited %d, want 81: %s", rc, secondOut)
	}
	time.Sleep(6500 * time.Millisecond) // past the TTL: only renewals keep it
	if _, err := c.TryAcquire(ctx, "doc:run", time.Minute); !errors.Is(err, pgfence.ErrNotAcquired) {
		cmd.Process.Kill()
		cmd.Wait() // its output is complete only once it has exited
		t.Fatalf("Go acquire 6.5 s into a 6 s lease the example renews: %v, want ErrNotAcquired; the example printed: %s", err, out)
	}
	if rc := code(cmd.Wait()); rc != 0 {
		t.Fatalf("the example exited %d: %s", rc, out)
	}
	if want := fmt.Sprintf("fence=%d key=doc:run", h.Fence); !strings.Contains(out.String(), want) {
		t.Fatalf("the command printed %q, want %q", out, want)
	}
	if h, _, err := c.Holder(ctx, "doc:run"); err != nil || h.Held {
		t.Fatalf("after the example the key is still held: %+v %v", h, err)
	}

	// A release from elsewhere: the next renewal finds the lease lost.
	cmd, out = start("doc:lost", "sleep", "30")
	h = waitHeld("doc:lost")
	if _, err := pool.Exec(ctx, `SELECT pgfence_release($1, $2)`, "doc:lost", h.Fence); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if rc := code(cmd.Wait()); rc != 83 {
		t.Fatalf("after the lease was released elsewhere the example exited %d, want 83: %s", rc, out)
	}
	if took := time.Since(began); took > 12*time.Second {
		t.Fatalf("the example noticed the loss after %v, want within a few renew intervals (2 s each), well before its command's 30 s", took)
	}
}
