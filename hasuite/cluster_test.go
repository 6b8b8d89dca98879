package hasuite

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgfence/pgfence/internal/testsupport/dbenv"
	"github.com/pgfence/pgfence/internal/testsupport/needtool"
)

// Patroni's timings. ttl is how long the leader key lives without an
// update; loop_wait how often each node runs its HA loop; retry_timeout how
// long a DCS or PostgreSQL operation is retried before the node demotes.
// primary_start_timeout 0 makes Patroni fail over at once when a primary's
// PostgreSQL dies, instead of restarting it in place.
const (
	patroniTTL     = 10
	patroniLoop    = 2
	patroniRetry   = 5
	clusterName    = "pgfence-ha"
	startupTimeout = 90 * time.Second
)

// node is one Patroni-managed PostgreSQL.
type node struct {
	name    string
	dir     string
	pgPort  int
	apiPort int
	cmd     *exec.Cmd // patroni
	log     *os.File
}

func (n *node) dataDir() string { return filepath.Join(n.dir, "data") }
func (n *node) api() string     { return "http://127.0.0.1:" + strconv.Itoa(n.apiPort) }

// postmasterPID is the node's postmaster, from its postmaster.pid.
func (n *node) postmasterPID() (int, error) {
	b, err := os.ReadFile(filepath.Join(n.dataDir(), "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(line))
}

// cluster is etcd plus three Patroni nodes in one temporary directory owned
// by the user PostgreSQL runs as.
type cluster struct {
	t        *testing.T
	base     *dbenv.Cluster // the directory, the binaries and the user
	etcd     *exec.Cmd
	etcdPort int
	nodes    []*node
	bin      string // cmd/pgfence, built on first use (pgfence)
}

// tools finds patroni and etcd, or ends t as needtool.Patroni.Missing does.
func tools(t *testing.T) (patroni, etcd string) {
	t.Helper()
	var missing []string
	find := func(name string) string {
		p, err := exec.LookPath(name)
		if err != nil {
			missing = append(missing, name)
		}
		return p
	}
	patroni, etcd = find("patroni"), find("etcd")
	if len(missing) > 0 {
		needtool.Patroni.Missing(t, fmt.Errorf("no %s on PATH", strings.Join(missing, " or ")))
	}
	return patroni, etcd
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startCluster starts etcd and three Patroni nodes and waits for a leader
// and two streaming replicas. Everything is stopped, by PID, at cleanup.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	patroni, etcdBin := tools(t)
	base, err := dbenv.NewCluster(0)
	if err != nil {
		if needtool.Patroni.Required() {
			t.Fatalf("the Patroni failover suite needs PostgreSQL's server binaries: %v, and %s is set", err, needtool.Patroni.Variable)
		}
		t.Skipf("SKIPPING the Patroni failover suite: %v; set %s=1 to make this a failure", err, needtool.Patroni.Variable)
	}
	c := &cluster{t: t, base: base}
	t.Cleanup(c.stop)
	c.startEtcd(etcdBin)
	for i := 1; i <= 3; i++ {
		n := &node{name: fmt.Sprintf("n%d", i), dir: filepath.Join(base.Dir, fmt.Sprintf("n%d", i)),
			pgPort: freePort(t), apiPort: freePort(t)}
		c.mkdir(n.dir)
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		c.startNode(patroni, n)
	}
	c.waitHealthy(false, startupTimeout)
	return c
}

// mkdir makes a directory owned by the cluster's user.
func (c *cluster) mkdir(dir string) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		c.t.Fatal(err)
	}
	if cred := c.base.Credential(); cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			c.t.Fatal(err)
		}
	}
}

// command runs bin as the cluster's user, logging to log, killed with
// SIGKILL if this process dies.
func (c *cluster) command(bin string, log *os.File, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Dir = c.base.Dir
	cmd.Env = append(os.Environ(), "HOME="+c.base.Dir, "LC_ALL=C.UTF-8", "TZ=UTC")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.base.Credential(), Pdeathsig: syscall.SIGKILL, Setpgid: true}
	return cmd
}

func (c *cluster) logFile(name string) *os.File {
	f, err := os.Create(filepath.Join(c.base.Dir, name))
	if err != nil {
		c.t.Fatal(err)
	}
	return f
}

// startEtcd starts a one-member etcd with its v2 API enabled: Patroni's
// "etcd" store (the v2 API) updates the leader key only if this node still
// holds it, which Patroni 3.0.2's "etcd3" store does not (see
// docs/failover.md).
func (c *cluster) startEtcd(bin string) {
	c.etcdPort = freePort(c.t)
	peer := freePort(c.t)
	dir := filepath.Join(c.base.Dir, "etcd")
	c.mkdir(dir)
	client := fmt.Sprintf("http://127.0.0.1:%d", c.etcdPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	c.etcd = c.command(bin, c.logFile("etcd.log"), "--name", "e1", "--data-dir", dir,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "e1="+peerURL, "--enable-v2=true")
	if err := c.etcd.Start(); err != nil {
		c.t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(client + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("etcd did not become healthy: %v (log: %s)", err, filepath.Join(c.base.Dir, "etcd.log"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// patroniYAML is one node's configuration (JSON is YAML).
func (c *cluster) patroniYAML(n *node) []byte {
	hba := []string{"local all all trust", "host all all 127.0.0.1/32 trust", "host replication all 127.0.0.1/32 trust"}
	cfg := map[string]any{
		"scope": clusterName, "name": n.name,
		"restapi": map[string]any{"listen": fmt.Sprintf("127.0.0.1:%d", n.apiPort), "connect_address": fmt.Sprintf("127.0.0.1:%d", n.apiPort)},
		"etcd":    map[string]any{"host": fmt.Sprintf("127.0.0.1:%d", c.etcdPort), "protocol": "http"},
		"bootstrap": map[string]any{
			"dcs": map[string]any{
				"ttl": patroniTTL, "loop_wait": patroniLoop, "retry_timeout": patroniRetry,
				"maximum_lag_on_failover": 1 << 30, "primary_start_timeout": 0,
				"synchronous_mode": false,
				"postgresql": map[string]any{
					"use_pg_rewind": true, "use_slots": true,
					"parameters": map[string]any{
						"wal_level": "replica", "hot_standby": "on", "wal_log_hints": "on",
						"max_wal_senders": 10, "max_replication_slots": 10, "max_connections": 100,
						"wal_keep_size": "128MB",
					},
				},
			},
			"initdb": []any{map[string]any{"encoding": "UTF8"}, map[string]any{"auth": "trust"}},
		},
		"postgresql": map[string]any{
			"listen":          fmt.Sprintf("127.0.0.1:%d", n.pgPort),
			"connect_address": fmt.Sprintf("127.0.0.1:%d", n.pgPort),
			"data_dir":        n.dataDir(), "bin_dir": c.base.BinDir,
			"pgpass":         filepath.Join(n.dir, "pgpass"),
			"authentication": map[string]any{"superuser": map[string]any{"username": "postgres"}, "replication": map[string]any{"username": "postgres"}, "rewind": map[string]any{"username": "postgres"}},
			"parameters":     map[string]any{"unix_socket_directories": n.dir, "fsync": "on"},
			"pg_hba":         hba,
		},
		"watchdog": map[string]any{"mode": "off"},
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	return b
}

func (c *cluster) startNode(bin string, n *node) {
	conf := filepath.Join(n.dir, "patroni.yml")
	if err := os.WriteFile(conf, c.patroniYAML(n), 0o644); err != nil {
		c.t.Fatal(err)
	}
	n.log = c.logFile(n.name + ".log")
	n.cmd = c.command(bin, n.log, conf)
	if err := n.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
}

// member is one node as Patroni's /cluster endpoint describes it.
type member struct {
	Name     string `json:"name"`
	Role     string `json:"role"`
	State    string `json:"state"`
	Timeline int64  `json:"timeline"`
	Port     int    `json:"port"`
}

// members asks the nodes' REST APIs, in turn, for the cluster's view.
func (c *cluster) members() ([]member, error) {
	var lastErr error
	for _, n := range c.nodes {
		var body struct {
			Members []member `json:"members"`
		}
		if err := c.getJSON(n.api()+"/cluster", &body); err != nil {
			lastErr = err
			continue
		}
		return body.Members, nil
	}
	return nil, lastErr
}

var apiClient = &http.Client{Timeout: 2 * time.Second}

func (c *cluster) getJSON(url string, into any) error {
	resp, err := apiClient.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(into)
}

// call sends a JSON request to a node's REST API.
func (c *cluster) call(method, url string, body any) (string, error) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequest(method, url, bytes.NewReader(b))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return string(out), fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, out)
	}
	return string(out), nil
}

// leader is the current leader and its timeline.
func (c *cluster) leader() (*node, int64, error) {
	ms, err := c.members()
	if err != nil {
		return nil, 0, err
	}
	for _, m := range ms {
		if m.Role == "leader" && m.State == "running" {
			return c.node(m.Name), m.Timeline, nil
		}
	}
	return nil, 0, errors.New("no running leader")
}

func (c *cluster) node(name string) *node {
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	c.t.Fatalf("no node %q", name)
	return nil
}

// waitHealthy waits for a running leader and two running replicas, one of
// them the synchronous standby when sync is set.
func (c *cluster) waitHealthy(sync bool, timeout time.Duration) []member {
	c.t.Helper()
	ms, err := c.healthy(sync, timeout)
	if err != nil {
		c.t.Fatal(err)
	}
	return ms
}

// rejoin waits for the cluster to be whole again after a failover: the old
// primary rewound and following. A node that is not running as a replica
// within 45 s is reinitialized from the leader (pg_basebackup), as an
// operator would: a rewound node has been seen waiting for WAL of its old
// timeline that never came. It is logged, since it is part of the outcome.
func (c *cluster) rejoin(sync bool) {
	c.t.Helper()
	ms, err := c.healthy(sync, 45*time.Second)
	if err == nil {
		return
	}
	for _, m := range ms {
		if m.Role != "leader" && m.State != "running" && m.State != "streaming" {
			c.t.Logf("node %s did not rejoin within 45 s (state %q); reinitializing it from the leader", m.Name, m.State)
			if _, err := c.call(http.MethodPost, c.node(m.Name).api()+"/reinitialize", map[string]any{"force": true}); err != nil {
				c.t.Logf("reinitializing %s: %v", m.Name, err)
			}
		}
	}
	c.waitHealthy(sync, 90*time.Second)
}

// healthy is waitHealthy that returns its failure.
func (c *cluster) healthy(sync bool, timeout time.Duration) ([]member, error) {
	deadline := time.Now().Add(timeout)
	for {
		ms, err := c.members()
		leaders, replicas, syncs := 0, 0, 0
		for _, m := range ms {
			running := m.State == "running" || m.State == "streaming"
			switch {
			case m.Role == "leader" && running:
				leaders++
			case (m.Role == "replica" || m.Role == "sync_standby") && running:
				replicas++
				if m.Role == "sync_standby" {
					syncs++
				}
			}
		}
		if err == nil && leaders == 1 && replicas == 2 && (!sync || syncs >= 1) && (sync || syncs == 0) {
			return ms, nil
		}
		if time.Now().After(deadline) {
			return ms, fmt.Errorf("the cluster did not become healthy (sync %v) within %v: %+v, %v (logs in %s)", sync, timeout, ms, err, c.base.Dir)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// setSync turns synchronous_mode (and synchronous_mode_strict) on or off in
// the DCS and waits for the cluster to follow.
func (c *cluster) setSync(on bool) {
	c.t.Helper()
	l, _, err := c.leader()
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.call(http.MethodPatch, l.api()+"/config",
		map[string]any{"synchronous_mode": on, "synchronous_mode_strict": on}); err != nil {
		c.t.Fatal(err)
	}
	c.rejoin(on)
}

// switchoverCandidate is the synchronous standby (Patroni refuses a
// switchover to another node in synchronous mode), else any replica.
func (c *cluster) switchoverCandidate() *node {
	c.t.Helper()
	ms, err := c.members()
	if err != nil {
		c.t.Fatal(err)
	}
	var replica *node
	for _, m := range ms {
		switch m.Role {
		case "sync_standby":
			return c.node(m.Name)
		case "replica":
			replica = c.node(m.Name)
		}
	}
	if replica == nil {
		c.t.Fatalf("no replica to switch over to: %+v", ms)
	}
	return replica
}

// switchover moves the leadership from the current leader to candidate.
func (c *cluster) switchover(from, to *node) error {
	_, err := c.call(http.MethodPost, from.api()+"/switchover", map[string]any{"leader": from.name, "candidate": to.name})
	return err
}

// dsn is the multi-host DSN clients use: any node, the writable one.
func (c *cluster) dsn() string {
	hosts := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		hosts[i] = fmt.Sprintf("127.0.0.1:%d", n.pgPort)
	}
	return "postgres://postgres@" + strings.Join(hosts, ",") +
		"/postgres?target_session_attrs=read-write&connect_timeout=2&sslmode=disable"
}

// stop ends every process the suite started, by PID: the Patroni nodes
// (SIGCONT first, in case a scenario left one stopped), each node's
// postmaster, and etcd; then removes the directory unless the test failed.
func (c *cluster) stop() {
	for _, n := range c.nodes {
		if n.cmd == nil || n.cmd.Process == nil {
			continue
		}
		if pid, err := n.postmasterPID(); err == nil {
			syscall.Kill(pid, syscall.SIGCONT)
		}
		n.cmd.Process.Signal(syscall.SIGCONT)
		n.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, n := range c.nodes {
		if n.cmd == nil || n.cmd.Process == nil {
			continue
		}
		waitOrKill(n.cmd, 20*time.Second)
		if pid, err := n.postmasterPID(); err == nil && syscall.Kill(pid, 0) == nil {
			syscall.Kill(pid, syscall.SIGQUIT) // Patroni left it running
		}
		n.log.Close()
	}
	if c.etcd != nil && c.etcd.Process != nil {
		c.etcd.Process.Signal(syscall.SIGTERM)
		waitOrKill(c.etcd, 10*time.Second)
	}
	if c.t.Failed() {
		c.t.Logf("the cluster's directory is kept for its logs: %s", c.base.Dir)
		return
	}
	c.base.Remove()
}

// waitOrKill waits for cmd to exit, and SIGKILLs it after timeout.
func waitOrKill(cmd *exec.Cmd, timeout time.Duration) {
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		cmd.Process.Kill()
		<-done
	}
}
