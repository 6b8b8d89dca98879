package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/cmd/pgfence/internal/watch"
	"github.com/pgfence/pgfence/internal/testsupport/faultproxy"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// syncBuffer is a bytes.Buffer that a running process writes while the
// test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// served is a running `pgfence serve`.
type served struct {
	base           string // http://127.0.0.1:PORT
	stdout, stderr *syncBuffer
}

var servingAt = regexp.MustCompile(`pgfence serve: (http://[^/ ]+)/`)

// startServe runs `pgfence serve --listen 127.0.0.1:0 --interval 250ms`
// plus args against db, waits until it prints its address, and stops it
// (SIGTERM, then checks it exited 0) when the test ends.
func startServe(t *testing.T, db string, args ...string) *served {
	t.Helper()
	all := append([]string{"serve", "--database-url", db, "--listen", "127.0.0.1:0", "--interval", "250ms"}, args...)
	cmd := exec.Command(bin, all...)
	cmd.Env = cleanEnv()
	s := &served{stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	cmd.Stdout, cmd.Stderr = s.stdout, s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("pgfence serve did not exit cleanly on SIGTERM: %v\nstderr: %s", err, s.stderr)
			}
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Errorf("pgfence serve did not stop within 15s of SIGTERM")
		}
	})
	deadline := time.After(30 * time.Second)
	for {
		if m := servingAt.FindStringSubmatch(s.stdout.String()); m != nil {
			s.base = m[1]
			return s
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("pgfence serve exited before serving: %v\nstdout: %s\nstderr: %s", err, s.stdout, s.stderr)
		case <-deadline:
			t.Fatalf("pgfence serve printed no address within 30s\nstdout: %s\nstderr: %s", s.stdout, s.stderr)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// get fetches path and returns the status and body.
func (s *served) get(t *testing.T, path string) (int, string) {
	t.Helper()
	return s.do(t, http.MethodGet, path)
}

func (s *served) do(t *testing.T, method, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// serveDatabase creates a database of its own with pgfence's schema, so
// that the figures serve reports are this test's alone, and returns its
// URL and a pool on it.
func serveDatabase(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	db := emptyDatabase(t)
	wantCode(t, pgfence(t, nil, "migrate", "--database-url", db, "up"), 0)
	pool, err := pgxpool.New(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return db, pool
}

// metricValue finds the sample of name whose labels include every
// key="value" in labels, in a Prometheus text exposition.
func metricValue(body, name string, labels ...string) (float64, bool) {
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		series, value := line[:i], line[i+1:]
		metric, rest, _ := strings.Cut(series, "{")
		if metric != name {
			continue
		}
		match := true
		for j := 0; j+1 < len(labels); j += 2 {
			if !strings.Contains(rest, labels[j]+`="`+labels[j+1]+`"`) {
				match = false
			}
		}
		if match {
			v, err := strconv.ParseFloat(value, 64)
			return v, err == nil
		}
	}
	return 0, false
}

// eventually retries check every 100ms for up to 20s; check returns ""
// when satisfied, else what it saw.
func eventually(t *testing.T, what string, check func() string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := check()
		if got == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s; last seen:\n%s", what, got)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestServeMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, pool := serveDatabase(t)
	// The sequence arrives with a later migration; this test owns its
	// database, so it removes the sequence to see the figure absent first.
	if _, err := pool.Exec(ctx, "DROP SEQUENCE IF EXISTS pgfence_stale_refusals"); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, db)

	c, err := pglease.New(pool, pglease.WithOwner("metrics-holder"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.TryAcquire(ctx, "serve/metrics-key", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	short, err := c.TryAcquire(ctx, "serve/short-key", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer short.Release(ctx)
	for _, stmt := range []string{
		// three runnable for 10s, one not yet due, one completed
		"INSERT INTO pgfence_jobs (queue, run_at) SELECT 'mail', now() - interval '10 seconds' FROM generate_series(1, 3)",
		"INSERT INTO pgfence_jobs (queue, run_at) VALUES ('mail', now() + interval '1 hour')",
		"INSERT INTO pgfence_jobs (queue, state, finished_at) VALUES ('mail', 'completed', now())",
		"INSERT INTO pgfence_jobs (queue, run_at) VALUES ('later', now() + interval '1 hour')",
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}

	fence := float64(l.Fence())
	var body string
	pgtest.Step(t, "the leases and the jobs are shown", func(t *testing.T) {
		eventually(t, "/metrics shows the lease and the jobs", func() string {
			_, body = s.get(t, "/metrics")
			want := []struct {
				name   string
				labels []string
				value  float64
			}{
				{"pgfence_serve_database_up", nil, 1},
				{"pgfence_leases_held", nil, 2},
				{"pgfence_leases_expiring_soon", nil, 1}, // the 3s lease; the 1-minute one is not
				{"pgfence_lease_fence", []string{"key", "serve/metrics-key", "owner", "metrics-holder"}, fence},
				{"pgfence_jobs", []string{"queue", "mail", "state", "available"}, 4},
				{"pgfence_jobs", []string{"queue", "mail", "state", "completed"}, 1},
				{"pgfence_jobs", []string{"queue", "later", "state", "available"}, 1},
			}
			for _, w := range want {
				if v, ok := metricValue(body, w.name, w.labels...); !ok || v != w.value {
					return w.name + " " + strings.Join(w.labels, ",") + ": want " + strconv.FormatFloat(w.value, 'f', -1, 64) + "\n" + body
				}
			}
			if age, ok := metricValue(body, "pgfence_jobs_oldest_runnable_age_seconds", "queue", "mail"); !ok || age < 10 || age > 60 {
				return "oldest runnable age of mail: want 10s to 60s\n" + body
			}
			return ""
		})
		if _, ok := metricValue(body, "pgfence_jobs_oldest_runnable_age_seconds", "queue", "later"); ok {
			t.Errorf("queue later has no runnable job, yet an oldest runnable age:\n%s", body)
		}
		if strings.Contains(body, "pgfence_stale_refusals") {
			t.Errorf("no pgfence_stale_refusals sequence, yet the metric is there (it must be absent, not zero):\n%s", body)
		}
	})

	pgtest.Step(t, "stale refusals are counted once the sequence exists", func(t *testing.T) {
		// The sequence appears and is drawn from three times (as the trigger
		// does on each refusal): the counter reads 3.
		for _, stmt := range []string{
			"CREATE SEQUENCE pgfence_stale_refusals",
			"SELECT nextval('pgfence_stale_refusals') FROM generate_series(1, 3)",
		} {
			if _, err := pool.Exec(ctx, stmt); err != nil {
				t.Fatalf("%s: %v", stmt, err)
			}
		}
		eventually(t, "/metrics counts 3 stale refusals", func() string {
			_, body = s.get(t, "/metrics")
			if v, ok := metricValue(body, "pgfence_stale_refusals_total"); !ok || v != 3 {
				return body
			}
			return ""
		})
	})

	pgtest.Step(t, "a released lease's series goes away", func(t *testing.T) {
		// The lease released: no longer held, and its series is gone.
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		eventually(t, "/metrics drops the released lease", func() string {
			_, body = s.get(t, "/metrics")
			if _, ok := metricValue(body, "pgfence_lease_fence", "key", "serve/metrics-key"); ok {
				return body
			}
			return ""
		})
	})

	pgtest.Step(t, "the api state carries the same figures", func(t *testing.T) {
		// /api/state carries the same figures for the page.
		_, js := s.get(t, "/api/state")
		var st watch.State
		if err := json.Unmarshal([]byte(js), &st); err != nil {
			t.Fatalf("/api/state is not JSON: %v\n%s", err, js)
		}
		if !st.OK || st.Data == nil || !st.Data.Stale.Present || st.Data.Stale.Count != 3 || len(st.Data.Queues) != 2 {
			t.Errorf("/api/state: %s", js)
		}
	})
}

func TestServeHealthz(t *testing.T) {
	t.Parallel()
	db, _ := serveDatabase(t)
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(db)
	if err != nil {
		t.Fatal(err)
	}
	network, addr := "tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	if filepath.IsAbs(cfg.Host) {
		network, addr = "unix", filepath.Join(cfg.Host, ".s.PGSQL."+strconv.Itoa(int(cfg.Port)))
	}
	proxy, err := faultproxy.New(func() (net.Conn, error) { return net.Dial(network, addr) })
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	q := u.Query()
	q.Del("host")
	q.Del("port")
	u.RawQuery = q.Encode()
	u.Host = "127.0.0.1:" + strconv.Itoa(int(proxy.Port()))
	s := startServe(t, u.String(), "--health-timeout", "1s")

	pgtest.Step(t, "healthy while the database is up", func(t *testing.T) {
		if code, body := s.get(t, "/healthz"); code != 200 || body != "ok\n" {
			t.Fatalf("/healthz with the database up: %d %q", code, body)
		}
	})

	pgtest.Step(t, "unavailable within the timeout once the database is unreachable", func(t *testing.T) {
		proxy.Close() // the database is now unreachable
		start := time.Now()
		code, body := s.get(t, "/healthz")
		if code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "unavailable: database ") {
			t.Fatalf("/healthz with the database unreachable: %d %q", code, body)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("/healthz took %v with a 1s --health-timeout", took)
		}
	})

	pgtest.Step(t, "metrics report the database down", func(t *testing.T) {
		eventually(t, "/metrics reports the database down", func() string {
			_, m := s.get(t, "/metrics")
			if v, ok := metricValue(m, "pgfence_serve_database_up"); !ok || v != 0 {
				return m
			}
			if strings.Contains(m, "pgfence_leases_held") {
				return "figures of a failed read must be absent:\n" + m
			}
			return ""
		})
	})
}

func TestServeReadOnlyAndLoopback(t *testing.T) {
	t.Parallel()
	db, _ := serveDatabase(t)
	s := startServe(t, db)
	t.Run("read-only endpoints", func(t *testing.T) {
		for _, path := range []string{"/", "/api/state", "/metrics", "/healthz"} {
			if code, _ := s.get(t, path); code != 200 {
				t.Errorf("GET %s: %d", path, code)
			}
			for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
				if code, _ := s.do(t, m, path); code != http.StatusMethodNotAllowed {
					t.Errorf("%s %s: want 405, got %d", m, path, code)
				}
			}
		}
		if code, _ := s.get(t, "/nope"); code != http.StatusNotFound {
			t.Errorf("GET /nope: want 404, got %d", code)
		}
	})

	t.Run("a foreign Host is refused", func(t *testing.T) {
		// A page elsewhere that rebinds its DNS name to 127.0.0.1 must not read
		// the figures: a foreign Host is refused.
		req, _ := http.NewRequest(http.MethodGet, s.base+"/api/state", nil)
		req.Host = "attacker.example:9187"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("Host attacker.example: want 403, got %d", resp.StatusCode)
		}
		if !strings.HasPrefix(s.base, "http://127.0.0.1:") {
			t.Errorf("serve listens on %s", s.base)
		}
	})

	t.Run("loopback by default, remote only with --allow-remote", func(t *testing.T) {
		// The default address is loopback, and a non-loopback one is refused
		// without --allow-remote (exit 80, before any connection is made).
		if !strings.Contains(serveUsage, "127.0.0.1:9187") {
			t.Error("the usage does not show the default address")
		}
		r := pgfence(t, nil, "serve", "-h")
		wantCode(t, r, 0)
		if !strings.Contains(r.stderr+r.stdout, `-listen string`) || !strings.Contains(r.stderr+r.stdout, `(default "127.0.0.1:9187")`) {
			t.Errorf("serve -h does not show the loopback default:\n%s", r)
		}
		for _, listen := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
			r := pgfence(t, nil, "serve", "--database-url", db, "--listen", listen)
			wantCode(t, r, exitUsage)
			if !strings.Contains(r.stderr, "--allow-remote") {
				t.Errorf("--listen %s: the refusal does not name --allow-remote:\n%s", listen, r)
			}
		}
		remote := startServe(t, db, "--listen", "0.0.0.0:0", "--allow-remote")
		// serve warns on stderr before it prints its address on stdout, but
		// the two pipes are copied into the buffers independently: the
		// address can arrive first.
		eventually(t, "--allow-remote on 0.0.0.0: a warning on stderr", func() string {
			if out := remote.stderr.String(); !strings.Contains(out, "WARNING") {
				return out
			}
			return ""
		})
	})
}

func TestServeNoPassword(t *testing.T) {
	t.Parallel()
	const password = "pw-S3rve-9c2d"
	db := passwordRole(t, password)
	s := startServe(t, db)
	var seen []string
	for _, path := range []string{"/", "/api/state", "/metrics", "/healthz"} {
		_, body := s.get(t, path)
		seen = append(seen, body)
	}
	seen = append(seen, s.stdout.String(), s.stderr.String())
	// An unreachable database: the error names the database, not the
	// password.
	bad := withUser(t, "postgres://127.0.0.1:1/x?connect_timeout=2", "bob", password)
	r := pgfence(t, nil, "serve", "--database-url", bad, "--listen", "127.0.0.1:0")
	wantCode(t, r, exitUnreachable)
	seen = append(seen, r.stdout, r.stderr)
	for _, out := range seen {
		if strings.Contains(out, password) {
			t.Fatalf("the password appears in serve's output:\n%s", out)
		}
	}
	if !strings.Contains(s.stdout.String(), "database ") {
		t.Errorf("serve does not say which database it reads:\n%s", s.stdout)
	}
}
