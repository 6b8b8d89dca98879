package pgtest

import (
	"net"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/internal/testsupport/faultproxy"
)

// ProxiedPool returns a pool on the test database whose connections go
// through a fault proxy, and the proxy. Its statements travel with their
// text in one round trip (QueryExecModeExec, unless an option changes it),
// so the proxy can recognise one and cut or delay it. opts adjust the
// configuration after that, as for Pool. Both end with the test.
func ProxiedPool(t testing.TB, opts ...func(*pgxpool.Config)) (*pgxpool.Pool, *faultproxy.Proxy) {
	t.Helper()
	return ProxiedPoolGated(t, nil, opts...)
}

// ProxiedPoolGated is ProxiedPool whose proxy opens a server connection
// only while open() says so (nil: always): a test closes the gate to keep
// new connections, pgx's cancel requests included, from reaching the server.
func ProxiedPoolGated(t testing.TB, open func() bool, opts ...func(*pgxpool.Config)) (*pgxpool.Pool, *faultproxy.Proxy) {
	t.Helper()
	var proxy *faultproxy.Proxy
	pool := Pool(t, func(cfg *pgxpool.Config) {
		up := cfg.ConnConfig
		network, addr := "tcp", net.JoinHostPort(up.Host, strconv.Itoa(int(up.Port)))
		if filepath.IsAbs(up.Host) { // a Unix socket directory
			network, addr = "unix", filepath.Join(up.Host, ".s.PGSQL."+strconv.Itoa(int(up.Port)))
		}
		var err error
		proxy, err = faultproxy.New(func() (net.Conn, error) {
			if open != nil && !open() {
				return nil, net.ErrClosed
			}
			return net.Dial(network, addr)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { proxy.Close() })
		cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", proxy.Port()
		cfg.ConnConfig.Fallbacks = nil
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
		for _, o := range opts {
			o(cfg)
		}
	})
	return pool, proxy
}
