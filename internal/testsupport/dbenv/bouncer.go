package dbenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// BouncerURLVariable names the environment variable that points the tests at a
// PgBouncer the caller runs (in transaction pooling mode, in front of the
// server the tests use, with a wildcard database entry so that the tests'
// databases are reachable under their own names).
const BouncerURLVariable = "PGFENCE_BOUNCER_URL"

// Bouncer is a PgBouncer in transaction pooling mode in front of a PostgreSQL
// server, either one the caller runs (PGFENCE_BOUNCER_URL) or one that
// StartBouncer started from the local binary in a temporary directory.
type Bouncer struct {
	// Source says where the bouncer came from, for messages.
	Source string

	cfg    *pgx.ConnConfig // how to reach the bouncer; Database is replaced per call
	dir    string
	cmd    *exec.Cmd
	exited chan struct{}
}

// URL connects to database db through the bouncer.
func (b *Bouncer) URL(db string) string {
	cfg := b.cfg.Copy()
	cfg.Database = db
	return ConnString(cfg)
}

// OpenBouncer returns the bouncer named by PGFENCE_BOUNCER_URL if it is set,
// and otherwise starts one from the pgbouncer binary in front of serverURL.
// The caller's bouncer must front the same server as serverURL.
func OpenBouncer(ctx context.Context, serverURL string, log io.Writer) (*Bouncer, error) {
	if v := strings.TrimSpace(os.Getenv(BouncerURLVariable)); v != "" {
		cfg, err := pgx.ParseConfig(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", BouncerURLVariable, err)
		}
		return &Bouncer{Source: BouncerURLVariable, cfg: cfg}, nil
	}
	return StartBouncer(ctx, serverURL, log)
}

// ErrNoBouncer: the pgbouncer binary is not installed.
var ErrNoBouncer = errors.New("pgbouncer not found on PATH or in /usr/sbin " +
	"(install it: apt-get install pgbouncer; or set " + BouncerURLVariable + " to a PgBouncer in transaction mode in front of the test server)")

// StartBouncer starts PgBouncer from the local binary, in transaction pooling
// mode, on a free loopback port, in front of the server at serverURL, with a
// wildcard database entry (every database of the server under its own name)
// and trust authentication for serverURL's user. The server pool is small
// (8 connections per database and user) so that clients really share server
// sessions. As root it runs as the user "postgres" (PgBouncer refuses root).
// Close stops it.
func StartBouncer(ctx context.Context, serverURL string, log io.Writer) (*Bouncer, error) {
	return StartBouncerMode(ctx, serverURL, "transaction", log)
}

// StartBouncerMode is StartBouncer with another pool_mode (session,
// transaction or statement).
func StartBouncerMode(ctx context.Context, serverURL, poolMode string, log io.Writer) (*Bouncer, error) {
	return StartBouncerPool(ctx, serverURL, poolMode, 8, log)
}

// StartBouncerPool is StartBouncerMode with poolSize server connections per
// database and user (default_pool_size): a benchmark gives every client a
// server session, so that it measures the pooler's hop and not a queue.
func StartBouncerPool(ctx context.Context, serverURL, poolMode string, poolSize int, log io.Writer) (*Bouncer, error) {
	if log == nil {
		log = io.Discard
	}
	bin, err := findBouncer()
	if err != nil {
		return nil, err
	}
	server, err := pgx.ParseConfig(serverURL)
	if err != nil {
		return nil, err
	}
	cred, err := runAs()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgfence-bouncer-")
	if err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	// A free port can be taken between our probe and PgBouncer's bind: try
	// again with another.
	for attempt := 0; ; attempt++ {
		b, err := startBouncerOnce(ctx, bin, dir, server, cred, poolMode, poolSize)
		if err == nil {
			fmt.Fprintf(log, "pgfence: started a throwaway PgBouncer (%s mode) on 127.0.0.1:%d in %s\n", poolMode, b.cfg.Port, dir)
			return b, nil
		}
		if attempt == 2 || ctx.Err() != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
}

func findBouncer() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer", "/usr/local/bin/pgbouncer"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", ErrNoBouncer
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// quoteINI quotes a value for pgbouncer.ini's connection strings.
func quoteINI(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func startBouncerOnce(ctx context.Context, bin, dir string, server *pgx.ConnConfig, cred *syscall.Credential, poolMode string, poolSize int) (*Bouncer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	target := "host=" + quoteINI(server.Host) + " port=" + strconv.Itoa(int(server.Port))
	ini := fmt.Sprintf(`[databases]
* = %s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 2000
logfile = %s
admin_users = %s
`, target, port, filepath.Join(dir, "userlist.txt"), poolMode, poolSize, filepath.Join(dir, "pgbouncer.log"), server.User)
	users := fmt.Sprintf("%q %q\n", server.User, server.Password)
	files := map[string]string{"pgbouncer.ini": ini, "userlist.txt": users}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			return nil, err
		}
		if cred != nil {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, err
			}
		}
	}
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if cred != nil {
		cmd.SysProcAttr.Credential = cred
	}
	dieWithParent(cmd.SysProcAttr)
	out, err := os.Create(filepath.Join(dir, "stderr.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("start pgbouncer: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); out.Close(); close(exited) }()

	cfg := server.Copy()
	cfg.Host, cfg.Port, cfg.TLSConfig, cfg.Fallbacks = "127.0.0.1", uint16(port), nil, nil
	b := &Bouncer{Source: "pgbouncer started from " + bin, cfg: cfg, dir: dir, cmd: cmd, exited: exited}
	deadline := time.Now().Add(20 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, b.URL(server.Database))
		if err == nil {
			conn.Close(ctx)
			return b, nil
		}
		select {
		case <-exited:
			logs, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			stderr, _ := os.ReadFile(filepath.Join(dir, "stderr.log"))
			return nil, fmt.Errorf("pgbouncer exited at start: %s%s", stderr, logs)
		case <-ctx.Done():
			b.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.stop()
			return nil, fmt.Errorf("pgbouncer did not accept connections within 20s: %w", err)
		}
	}
}

// PID is the process id of a bouncer this package started, 0 for
// PGFENCE_BOUNCER_URL's.
func (b *Bouncer) PID() int {
	if b == nil || b.cmd == nil || b.cmd.Process == nil {
		return 0
	}
	return b.cmd.Process.Pid
}

// stop ends the process (SIGTERM: immediate shutdown) and waits for it.
func (b *Bouncer) stop() {
	if b.cmd == nil {
		return
	}
	b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(10 * time.Second):
		b.cmd.Process.Kill()
		<-b.exited
	}
	b.cmd = nil
}

// Close stops a bouncer that StartBouncer started and removes its directory;
// for PGFENCE_BOUNCER_URL it does nothing.
func (b *Bouncer) Close() error {
	if b == nil || b.dir == "" {
		return nil
	}
	b.stop()
	return os.RemoveAll(b.dir)
}
