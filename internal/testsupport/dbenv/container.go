package dbenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// containerTool is the program, in a module of its own, that starts a
// PostgreSQL container with testcontainers-go. It lives outside pgfence's
// main module so that neither the CLI nor a user's build ever links or
// downloads testcontainers and the Docker SDK.
const containerTool = "tools/dbcontainer"

// containerHowTo is what a person types to start the container by hand.
const containerHowTo = "go run -C " + containerTool + " .   (from a pgfence checkout; it prints the URL to export)"

// urlLine prefixes the line on which the tool prints its URL.
const urlLine = "PGFENCE_DATABASE_URL="

// startContainer runs the container tool when a Docker engine answers and
// uses the URL it prints. The tool stops and removes its container when its
// standard input closes, which Close does (and the kernel does when this
// process dies).
func startContainer(ctx context.Context, log io.Writer) (*Server, error) {
	if err := dockerAnswers(); err != nil {
		return nil, err
	}
	dir, err := containerToolDir()
	if err != nil {
		return nil, err
	}
	started := time.Now()
	cmd := exec.Command("go", "run", ".", "-stdin")
	cmd.Dir = dir
	cmd.Stderr = log
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("go run %s: %w", containerTool, err)
	}
	stop := func() error { return stopTool(cmd, stdin) }
	url, err := readURL(ctx, stdout, 5*time.Minute)
	if err != nil {
		stop()
		return nil, fmt.Errorf("%s: %w", containerTool, err)
	}
	go io.Copy(io.Discard, stdout)
	fmt.Fprintf(log, "pgfence: started a throwaway PostgreSQL container with %s (%.1fs); it is removed on exit\n",
		containerTool, time.Since(started).Seconds())
	return &Server{URL: url, Source: "a container (" + containerTool + ")", Throwaway: true, stop: stop}, nil
}

// readURL waits for the tool's URL line. The first run compiles the tool
// and pulls the image, hence the long limit.
func readURL(ctx context.Context, stdout io.Reader, limit time.Duration) (string, error) {
	found := make(chan string, 1)
	go func() {
		defer close(found)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if url, ok := strings.CutPrefix(sc.Text(), urlLine); ok {
				found <- url
				return
			}
		}
	}()
	select {
	case url, ok := <-found:
		if !ok {
			return "", errors.New("exited without printing a URL (its messages are above)")
		}
		return url, nil
	case <-ctx.Done():
		return "", ctx.Err()
	case <-time.After(limit):
		return "", fmt.Errorf("no URL within %v", limit)
	}
}

// stopTool closes the tool's input, which makes it remove the container,
// and waits for it.
func stopTool(cmd *exec.Cmd, stdin io.Closer) error {
	stdin.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		return fmt.Errorf("%s did not stop within a minute; killed it (its container may remain: docker ps)", containerTool)
	}
}

// dockerAnswers reports whether a Docker engine accepts connections on
// DOCKER_HOST or a usual socket, so that a machine without one is told at
// once instead of after compiling the tool.
func dockerAnswers() error {
	var endpoints []string
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		endpoints = append(endpoints, h)
	}
	endpoints = append(endpoints, "unix:///var/run/docker.sock")
	if home, err := os.UserHomeDir(); err == nil {
		endpoints = append(endpoints, "unix://"+filepath.Join(home, ".docker/run/docker.sock"))
	}
	if rt := os.Getenv("XDG_RUNTIME_DIR"); rt != "" {
		endpoints = append(endpoints, "unix://"+filepath.Join(rt, "docker.sock"))
	}
	for _, e := range endpoints {
		network, addr, ok := strings.Cut(e, "://")
		if !ok || (network != "unix" && network != "tcp") {
			continue
		}
		if c, err := net.DialTimeout(network, addr, 2*time.Second); err == nil {
			c.Close()
			return nil
		}
	}
	return fmt.Errorf("no Docker engine answers (tried %s)", strings.Join(endpoints, ", "))
}

// containerToolDir finds the tool in the checkout this process runs from
// (the tests' and the demo's working directory is inside it).
func containerToolDir() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("not inside a pgfence checkout: %s %w", containerTool, errNotFound)
	}
	dir := filepath.Join(filepath.Dir(gomod), containerTool)
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("%s %w next to %s", containerTool, errNotFound, gomod)
	}
	return dir, nil
}
