package dbenv

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestContainerToolDir: the tests find tools/dbcontainer, a module of its
// own, from inside the checkout.
func TestContainerToolDir(t *testing.T) {
	dir, err := containerToolDir()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "module github.com/pgfence/pgfence/tools/dbcontainer") {
		t.Errorf("%s/go.mod is not the container tool's module:\n%s", dir, b)
	}
}

// TestReadURL: the URL line is found among the tool's other output; a tool
// that exits without one, or a cancelled context, is an error, not a hang.
func TestReadURL(t *testing.T) {
	url, err := readURL(context.Background(),
		strings.NewReader("pulling postgres:16-alpine\n"+urlLine+"postgres://postgres:pgfence@localhost:32768/postgres?sslmode=disable\n"), time.Second)
	if err != nil || url != "postgres://postgres:pgfence@localhost:32768/postgres?sslmode=disable" {
		t.Errorf("readURL = %q, %v", url, err)
	}
	if _, err := readURL(context.Background(), strings.NewReader("no engine\n"), time.Second); err == nil {
		t.Error("readURL accepted output without a URL")
	}
	pr, pw := io.Pipe()
	defer pw.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := readURL(ctx, pr, time.Minute); err == nil {
		t.Error("readURL did not end with its context")
	}
}

// TestDockerAnswersNowhere: with DOCKER_HOST pointing at nothing and no
// socket, the error names what was tried.
func TestDockerAnswersNowhere(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "nothing.sock"))
	t.Setenv("HOME", t.TempDir())
	t.Setenv("XDG_RUNTIME_DIR", "")
	if _, err := os.Stat("/var/run/docker.sock"); err == nil {
		t.Skip("this machine has a Docker socket at /var/run/docker.sock; the negative case cannot be built here")
	}
	err := dockerAnswers()
	if err == nil || !strings.Contains(err.Error(), "nothing.sock") {
		t.Errorf("dockerAnswers = %v, want an error naming the socket tried", err)
	}
}
