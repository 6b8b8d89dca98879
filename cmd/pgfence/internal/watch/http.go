package watch

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"
)

//go:embed page.html
var page []byte

// Pinger is what /healthz asks: *pgxpool.Pool satisfies it.
type Pinger interface {
	Ping(ctx context.Context) error
}

// HandlerOptions configures Handler.
type HandlerOptions struct {
	// Database describes the database for humans, without its password
	// (internal/dsn's redaction).
	Database string
	// HealthTimeout bounds the database's answer to /healthz. Default 2s.
	HealthTimeout time.Duration
	// AnyHost accepts requests whatever their Host header. By default only
	// loopback names (localhost, 127.0.0.0/8, ::1) are accepted, so that a
	// web page in the operator's browser cannot read the endpoints through
	// a DNS name rebound to 127.0.0.1.
	AnyHost bool
	// Scrub removes secrets from error texts. Default: unchanged.
	Scrub func(string) string
	// Doctor, when set, answers /api/doctor: the latest diagnosis of the
	// deployment (pgfence doctor's findings), encoded as JSON. Without it
	// /api/doctor is 404 and the page says so.
	Doctor func() any
}

// Handler serves the read-only endpoints:
//
//	/            the live page
//	/api/state   the latest snapshot as JSON (State)
//	/api/doctor  the latest diagnosis as JSON (HandlerOptions.Doctor)
//	/metrics     the Prometheus exposition (m)
//	/healthz     200 "ok" when the database answers within HealthTimeout,
//	             503 with a short reason otherwise
//
// Every endpoint answers GET and HEAD only: other methods get 405.
func Handler(w *Watcher, m *Metrics, db Pinger, opts HandlerOptions) http.Handler {
	if opts.HealthTimeout <= 0 {
		opts.HealthTimeout = 2 * time.Second
	}
	if opts.Scrub == nil {
		opts.Scrub = func(s string) string { return s }
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/{$}", func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "text/html; charset=utf-8")
		rw.Write(page)
	})
	mux.HandleFunc("/api/state", func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		json.NewEncoder(rw).Encode(w.State(opts.Database))
	})
	if opts.Doctor != nil {
		mux.HandleFunc("/api/doctor", func(rw http.ResponseWriter, r *http.Request) {
			rw.Header().Set("Content-Type", "application/json")
			json.NewEncoder(rw).Encode(opts.Doctor())
		})
	}
	mux.Handle("/metrics", m)
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), opts.HealthTimeout)
		defer cancel()
		rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := db.Ping(ctx); err != nil {
			reason := err.Error()
			if ctx.Err() != nil {
				reason = fmt.Sprintf("no answer within %v", opts.HealthTimeout)
			}
			rw.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(rw, "unavailable: database %s: %s\n", opts.Database, opts.Scrub(reason))
			return
		}
		fmt.Fprintln(rw, "ok")
	})
	return readOnly(opts.AnyHost, mux)
}

// readOnly refuses every method but GET and HEAD, and requests for a
// non-loopback Host unless anyHost.
func readOnly(anyHost bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Cache-Control", "no-store")
		rw.Header().Set("X-Content-Type-Options", "nosniff")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			rw.Header().Set("Allow", "GET, HEAD")
			http.Error(rw, "pgfence serve is read-only: only GET and HEAD are allowed", http.StatusMethodNotAllowed)
			return
		}
		if !anyHost && !IsLoopbackHost(r.Host) {
			http.Error(rw, "pgfence serve answers only to a loopback host name (localhost, 127.0.0.1, [::1]); start it with --allow-remote to serve others", http.StatusForbidden)
			return
		}
		next.ServeHTTP(rw, r)
	})
}

// IsLoopbackHost reports whether hostport (a Host header or a listen
// address; the port is optional) names the loopback interface: localhost,
// an address in 127.0.0.0/8, or ::1. An empty host (":9187", all
// interfaces) is not loopback.
func IsLoopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
