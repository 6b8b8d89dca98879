package dbenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// findBinDir returns a directory holding initdb and postgres.
func findBinDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		// Follow symlinks (/usr/local/bin/initdb -> /usr/lib/postgresql/15/bin)
		// to the directory that also holds pg_basebackup and friends.
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	var dirs []string
	for _, pattern := range []string{
		"/usr/lib/postgresql/*/bin",
		"/usr/pgsql-*/bin",
		"/usr/local/pgsql/bin",
		"/opt/homebrew/opt/postgresql*/bin",
		"/usr/local/opt/postgresql*/bin",
	} {
		m, _ := filepath.Glob(pattern)
		dirs = append(dirs, m...)
	}
	// Newest major version first ("/usr/lib/postgresql/17" > ".../15").
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	return "", fmt.Errorf("initdb and postgres %w on PATH or under /usr/lib/postgresql/*/bin", errNotFound)
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// runAs returns the credential to run PostgreSQL with: none for an ordinary
// user, the "postgres" user for root (PostgreSQL refuses to run as root).
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root and there is no user %q to run PostgreSQL as: %w", "postgres", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// Cluster is a PostgreSQL cluster in a temporary directory. It is exported
// within the module for tests that need a cluster of their own (a failover
// test starts a primary and a standby).
type Cluster struct {
	BinDir  string
	Dir     string // the temporary directory; data lives in Dir/data
	SockDir string
	Port    int
	cred    *syscall.Credential
	cmd     *exec.Cmd
	exited  chan struct{}
}

// Credential is the user the cluster's processes run as (nil: this
// process's own user), for other programs that must run as that user (an
// HA manager that starts PostgreSQL itself).
func (c *Cluster) Credential() *syscall.Credential { return c.cred }

// DataDir is the cluster's data directory.
func (c *Cluster) DataDir() string { return filepath.Join(c.Dir, "data") }

// URL connects to database db as the superuser "postgres" over the socket.
func (c *Cluster) URL(db string) string {
	q := url.Values{"host": {c.SockDir}, "port": {strconv.Itoa(c.Port)}, "sslmode": {"disable"}}
	return (&url.URL{Scheme: "postgres", User: url.User("postgres"), Path: "/" + db, RawQuery: q.Encode()}).String()
}

// NewCluster creates an empty temporary directory for a cluster, owned by the
// user PostgreSQL will run as. Port only names the socket file; nothing
// listens on TCP.
func NewCluster(port int) (*Cluster, error) {
	bin, err := findBinDir()
	if err != nil {
		return nil, err
	}
	cred, err := runAs()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", clusterPattern)
	if err != nil {
		return nil, err
	}
	c := &Cluster{BinDir: bin, Dir: dir, SockDir: filepath.Join(dir, "s"), Port: port, cred: cred}
	if err := recordOwner(dir); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := os.Mkdir(c.SockDir, 0o700); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if cred != nil {
		for _, p := range []string{dir, c.SockDir} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				os.RemoveAll(dir)
				return nil, err
			}
		}
	}
	return c, nil
}

// Command runs one of the cluster's binaries as the cluster's user.
func (c *Cluster) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir, name), args...)
	cmd.Dir = c.Dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC")
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	return cmd
}

// InitDB creates the data directory with trust authentication.
func (c *Cluster) InitDB(ctx context.Context) error {
	out, err := c.Command(ctx, "initdb", "-D", c.DataDir(), "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--no-sync", "--no-locale").CombinedOutput()
	if err != nil {
		hint := ""
		if c.cred != nil && strings.Contains(err.Error()+string(out), "ermission denied") {
			hint = fmt.Sprintf(" (PostgreSQL runs as the user %q here and must be able to reach %s: "+
				"a private TMPDIR blocks it; point TMPDIR at a directory others may traverse, such as /tmp)", "postgres", c.Dir)
		}
		return fmt.Errorf("initdb: %v: %s%s", err, out, hint)
	}
	return nil
}

// Start runs postgres as a child of this process with the given extra
// settings, and waits until it accepts connections. On Linux, if this
// process dies, the kernel sends the server SIGQUIT (immediate shutdown), so
// no cluster outlives its owner.
func (c *Cluster) Start(ctx context.Context, log io.Writer, settings ...string) error {
	args := []string{"-D", c.DataDir(), "-k", c.SockDir, "-p", strconv.Itoa(c.Port),
		"-c", "listen_addresses=", "-c", "fsync=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200", "-c", "shared_buffers=64MB"}
	for _, s := range settings {
		args = append(args, "-c", s)
	}
	cmd := c.Command(context.Background(), "postgres", args...)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	dieWithParent(cmd.SysProcAttr)
	logFile, err := os.Create(filepath.Join(c.Dir, "server.log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start postgres: %w", err)
	}
	c.cmd = cmd
	c.exited = make(chan struct{})
	go func() { cmd.Wait(); logFile.Close(); close(c.exited) }()

	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		select {
		case <-c.exited:
			out, _ := os.ReadFile(filepath.Join(c.Dir, "server.log"))
			return fmt.Errorf("postgres exited at start: %s", out)
		case <-ctx.Done():
			c.Stop()
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.Stop()
			return fmt.Errorf("postgres did not accept connections within 60s: %w", err)
		}
	}
}

// Stop shuts the server down fast (SIGINT) and waits for it; it does not
// remove the directory.
func (c *Cluster) Stop() error {
	if c.cmd == nil {
		return nil
	}
	c.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		c.cmd.Process.Kill()
		<-c.exited
	}
	c.cmd = nil
	return nil
}

// Remove stops the server and deletes its directory.
func (c *Cluster) Remove() error {
	c.Stop()
	return os.RemoveAll(c.Dir)
}

func startLocal(ctx context.Context, log io.Writer) (*Server, error) {
	sweepTemp(log)
	started := time.Now()
	c, err := NewCluster(5432)
	if err != nil {
		return nil, err
	}
	if err := c.InitDB(ctx); err != nil {
		c.Remove()
		return nil, err
	}
	if err := c.Start(ctx, log); err != nil {
		c.Remove()
		return nil, err
	}
	fmt.Fprintf(log, "pgfence: started a throwaway PostgreSQL in %s from %s (%.1fs); it is removed on exit\n",
		c.Dir, c.BinDir, time.Since(started).Seconds())
	if errors.Is(ctx.Err(), context.Canceled) {
		c.Remove()
		return nil, ctx.Err()
	}
	return &Server{URL: c.URL("postgres"), Source: "local binaries in " + c.BinDir, Throwaway: true, stop: c.Remove}, nil
}

// Kill sends the server's postmaster sig (SIGKILL simulates a crash) and
// waits for it to exit.
func (c *Cluster) Kill(sig syscall.Signal) {
	if c.cmd == nil {
		return
	}
	c.cmd.Process.Signal(sig)
	<-c.exited
	c.cmd = nil
	if sig == syscall.SIGKILL {
		// Children of a killed postmaster exit on their own once they notice;
		// wait until the lock file's PID no longer runs, so a restart can
		// take over the data directory.
		time.Sleep(200 * time.Millisecond)
	}
}

// ClientTool returns the path of a PostgreSQL client program (psql,
// pg_dump): the one beside the server binaries the tests start clusters
// from, else the one on PATH.
func ClientTool(name string) (string, error) {
	if dir, err := findBinDir(); err == nil {
		if p := filepath.Join(dir, name); fileExists(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s %w beside initdb or on PATH (install the PostgreSQL client programs: apt-get install postgresql-client)", name, errNotFound)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
