package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/pgfence/pgfence/migrations"
)

// env is the benchmark's own database and the connections to it.
type env struct {
	opts     *options
	adminURL string
	dbName   string
	redis    *redis.Client
	redisErr error // why Redis is skipped, if it is
}

// openEnv creates pgfence_bench_<random> on the server and migrates it with
// pgfence's migrations.
func openEnv(ctx context.Context, o *options) (*env, error) {
	cfg, err := pgx.ParseConfig(o.dbURL)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w (pass -db or PGFENCE_DATABASE_URL, e.g. postgres://postgres@127.0.0.1:5432/postgres)", err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	e := &env{opts: o, adminURL: o.dbURL, dbName: "pgfence_bench_" + hex.EncodeToString(b)}
	admin, err := pgx.Connect(ctx, o.dbURL)
	if err != nil {
		return nil, fmt.Errorf("connect to %s@%s:%d: %w (is PostgreSQL running? set -db or PGFENCE_DATABASE_URL)", cfg.User, cfg.Host, cfg.Port, err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{e.dbName}.Sanitize()); err != nil {
		return nil, fmt.Errorf("create database %s: %w", e.dbName, err)
	}
	logf("database %s created", e.dbName)

	pool, err := e.pool(ctx, 4)
	if err != nil {
		e.close()
		return nil, err
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		e.close()
		return nil, err
	}

	e.redis = redis.NewClient(&redis.Options{Addr: o.redisAddr, PoolSize: 64, DialTimeout: time.Second})
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := e.redis.Ping(pctx).Err(); err != nil {
		e.redisErr = fmt.Errorf("Redis at %s unreachable: %v", o.redisAddr, err)
		logf("skipping redislock: %v", e.redisErr)
	}
	return e, nil
}

// pool opens a pool on the benchmark database with up to max connections.
func (e *env) pool(ctx context.Context, max int, opts ...func(*pgxpool.Config)) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(e.adminURL)
	if err != nil {
		return nil, err
	}
	for _, o := range opts {
		o(cfg)
	}
	cfg.ConnConfig.Database = e.dbName
	cfg.MaxConns = int32(max)
	cfg.MinConns = 0
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := p.Ping(ctx); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// warm opens n connections of p at once, so that no contender pays for
// connecting inside its timed turn.
func warm(ctx context.Context, p *pgxpool.Pool, n int) error {
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := p.Acquire(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	return nil
}

// close drops the benchmark database (forcing out any connection left), with
// a context of its own so that it also runs after Ctrl-C.
func (e *env) close() {
	if e.redis != nil {
		_ = e.redis.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, e.adminURL)
	if err != nil {
		logf("could not drop database %s: %v", e.dbName, err)
		return
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{e.dbName}.Sanitize()+" WITH (FORCE)"); err != nil {
		logf("could not drop database %s: %v", e.dbName, err)
		return
	}
	logf("database %s dropped", e.dbName)
}

// exec runs statements on the benchmark database outside any contender.
func (e *env) exec(ctx context.Context, p *pgxpool.Pool, sqls ...string) error {
	for _, s := range sqls {
		if _, err := p.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", firstLine(s), err)
		}
	}
	return nil
}

// runQuiet runs a program and returns its standard output.
func runQuiet(bin string, args ...string) (string, error) {
	out, err := exec.Command(bin, args...).Output()
	return string(out), err
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

// machine describes the client machine.
type machine struct {
	cpus      int
	cpuModel  string
	memory    string
	goVersion string
	os        string
	load      string
}

func machineInfo() machine {
	m := machine{cpus: runtime.NumCPU(), goVersion: runtime.Version(), os: runtime.GOOS + "/" + runtime.GOARCH}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.cpuModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "MemTotal:") {
				var kb int64
				fmt.Sscanf(strings.TrimPrefix(l, "MemTotal:"), "%d", &kb)
				m.memory = fmt.Sprintf("%.1f GiB", float64(kb)/1024/1024)
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			m.load = strings.Join(f[:3], " ")
		}
	}
	return m
}

// pgSettings that matter for commit-bound workloads.
var pgSettingNames = []string{"fsync", "synchronous_commit", "wal_sync_method", "full_page_writes", "shared_buffers", "max_connections", "commit_delay", "wal_buffers", "max_wal_size", "autovacuum"}

type pgServer struct {
	version  string
	settings [][2]string
	tls      bool // the benchmark's connections use TLS
}

func pgInfo(ctx context.Context, e *env) (pgServer, error) {
	var s pgServer
	conn, err := e.pool(ctx, 1)
	if err != nil {
		return s, err
	}
	defer conn.Close()
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&s.version); err != nil {
		return s, err
	}
	if err := conn.QueryRow(ctx, "SELECT coalesce((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false)").Scan(&s.tls); err != nil {
		return s, err
	}
	for _, n := range pgSettingNames {
		var v string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", n).Scan(&v); err != nil {
			return s, err
		}
		s.settings = append(s.settings, [2]string{n, v})
	}
	return s, nil
}

// runPgTestFsync runs PostgreSQL's pg_test_fsync, if installed, for the cost
// of one durable commit on this disk: the floor of every durable statement.
func runPgTestFsync(ctx context.Context) string {
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_test_fsync")
	sort.Strings(bins)
	bin := ""
	if len(bins) > 0 {
		bin = bins[len(bins)-1]
	} else if p, err := exec.LookPath("pg_test_fsync"); err == nil {
		bin = p
	}
	if bin == "" {
		return "pg_test_fsync not found (install the PostgreSQL server package)"
	}
	dir, err := os.MkdirTemp("", "pgfence-bench-fsync")
	if err != nil {
		return err.Error()
	}
	defer os.RemoveAll(dir)
	logf("pg_test_fsync (about 15 s)")
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, bin, "-s", "1", "-f", filepath.Join(dir, "t")).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("pg_test_fsync failed: %v\n%s", err, out)
	}
	// Keep the part about one 8 kB write per sync: what a commit does.
	var keep []string
	on := false
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "Compare file sync methods using one 8kB write") {
			on = true
		} else if strings.HasPrefix(l, "Compare file sync methods using two") {
			break
		}
		if on && strings.TrimSpace(l) != "" {
			keep = append(keep, l)
		}
	}
	if len(keep) == 0 {
		return strings.TrimSpace(string(out))
	}
	return bin + " -s 1:\n" + strings.Join(keep, "\n")
}
