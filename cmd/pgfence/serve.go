package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/pgfence/pgfence/cmd/pgfence/internal/watch"
)

const serveUsage = `Usage: pgfence serve [--listen 127.0.0.1:9187] [--allow-remote] [--interval 2s]
                     [--doctor-interval 30s] [--table NAME]... [--patroni URL]

Serves, read-only (GET and HEAD; other methods get 405):
  /            a live page: leases (holder, fence, time left by the database
               clock), semaphores and shared/exclusive keys (permits held,
               holders by slot), fair waiters in queue order, job queues (counts by state, oldest runnable job), and
               stale writes refused by the fencing trigger; it updates itself
               every second without reloading
  /api/state   the same as JSON
  /api/doctor  pgfence doctor's findings (ok, warn, fail, what to do) as
               JSON, read again every --doctor-interval (--table and
               --patroni as for pgfence doctor); the page shows them too,
               under "Doctor"
  /metrics     Prometheus metrics (text format):
               pgfence_leases_held, pgfence_leases_expiring_soon,
               pgfence_lease_fence{key,owner} (at most --limit keys),
               pgfence_lease_remaining_seconds{key,owner} (+Inf: never expires),
               pgfence_jobs{queue,state},
               pgfence_jobs_oldest_runnable_age_seconds{queue},
               pgfence_permits_in_use{key,kind}, pgfence_permits{key},
               pgfence_exclusive_waiters{key}, pgfence_queue_waiters{key,kind},
               pgfence_stale_refusals_total (absent where the database has no
               pgfence_stale_refusals sequence), pgfence_serve_database_up,
               pgfence_serve_snapshot_age_seconds
  /healthz     200 "ok" when the database answers within --health-timeout,
               503 with the reason otherwise

The database is read once per --interval, however many viewers and scrapers
there are. serve listens on loopback only unless --allow-remote is given: the
endpoints have no authentication. It runs until interrupted (SIGINT/SIGTERM).
`

func (a *app) cmdServe(ctx context.Context, args []string) error {
	var url, listen string
	var allowRemote bool
	var interval, soon, healthTimeout time.Duration
	var limit int
	var doc doctorOpts
	var doctorInterval time.Duration
	fs := a.newFlags("serve", serveUsage, &url)
	durVar(fs, &doctorInterval, "doctor-interval", 30*time.Second, "time between two diagnoses for /api/doctor and the page's Doctor section (at least 5s)")
	fs.Var(tablesFlag{&doc.tables}, "table", "doctor: check the fencing trigger of table `NAME` (SCHEMA.NAME allowed; repeatable)")
	fs.StringVar(&doc.patroni, "patroni", "", "doctor: Patroni REST API `URL` of any node, e.g. http://127.0.0.1:8008")
	fs.StringVar(&listen, "listen", "127.0.0.1:9187", "address to listen on, host:port (port 0 picks a free one)")
	fs.BoolVar(&allowRemote, "allow-remote", false, "allow a non-loopback --listen address and any Host header (no authentication!)")
	durVar(fs, &interval, "interval", 2*time.Second, "time between two reads of the database")
	durVar(fs, &soon, "soon", 5*time.Second, "horizon of pgfence_leases_expiring_soon")
	durVar(fs, &healthTimeout, "health-timeout", 2*time.Second, "how long /healthz waits for the database")
	fs.IntVar(&limit, "limit", 100, "at most this many held keys (pgfence_lease_fence series) and queues per read")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fail(exitUsage, "pgfence serve: unexpected argument %q", pos[0])
	}
	if err := checkServeFlags(listen, allowRemote, interval, soon, healthTimeout, limit); err != nil {
		return err
	}
	if doctorInterval < doctorMinInterval {
		return fail(exitUsage, "pgfence serve: --doctor-interval %v is too short: give at least %v (each diagnosis counts the lease table)", doctorInterval, doctorMinInterval)
	}
	if doc.patroni != "" {
		if err := a.checkPatroniURL(doc.patroni); err != nil {
			return err
		}
	}

	pool, where, err := a.connect(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	w := watch.New(pool, watch.Options{Interval: interval, Soon: soon, Limit: limit, Scrub: a.scrub.String, Schema: a.schemaName()})
	// The first read before serving: a missing schema or a refused login
	// ends serve with the usual exit code and hint; later failures are
	// shown on the page, /healthz and pgfence_serve_database_up instead.
	if err := w.Refresh(ctx); err != nil {
		return dbError(where, err)
	}
	dw := &doctorWatch{app: a, pool: pool, where: where, opts: doc, interval: doctorInterval}
	handler := watch.Handler(w, watch.NewMetrics(w), pool, watch.HandlerOptions{
		Database: where, HealthTimeout: healthTimeout, AnyHost: allowRemote, Scrub: a.scrub.String, Doctor: dw.state,
	})

	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fail(exitFailed, "pgfence serve: cannot listen on %s: %v", listen, err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}

	readCtx, stopReading := context.WithCancel(ctx)
	var reading sync.WaitGroup
	reading.Add(2)
	go func() {
		defer reading.Done()
		w.Run(readCtx)
	}()
	go func() {
		defer reading.Done()
		dw.run(readCtx)
	}()
	defer func() {
		stopReading()
		reading.Wait()
	}()

	addr := ln.Addr().String()
	if allowRemote && !watch.IsLoopbackHost(addr) {
		fmt.Fprintf(a.stderr, "pgfence serve: WARNING: listening on %s, beyond this machine, without authentication (--allow-remote)\n", addr)
	}
	fmt.Fprintf(a.stdout, "pgfence serve: http://%s/ (metrics at /metrics, health at /healthz), database %s\n", addr, where)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fail(exitFailed, "pgfence serve: %v", err)
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fail(exitFailed, "pgfence serve: shutdown: %v", err)
	}
	fmt.Fprintln(a.stdout, "pgfence serve: stopped")
	return nil
}

// checkServeFlags refuses flag values that cannot work, before anything is
// opened. A non-loopback --listen is refused without --allow-remote: the
// endpoints have no authentication, and the figures (keys, owners, queue
// names) are the operator's, not the network's.
// doctorMinInterval is the shortest --doctor-interval: a diagnosis counts
// the lease table, which may hold millions of rows.
const doctorMinInterval = 5 * time.Second

func checkServeFlags(listen string, allowRemote bool, interval, soon, healthTimeout time.Duration, limit int) error {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return fail(exitUsage, "pgfence serve: --listen %q: give host:port, e.g. 127.0.0.1:9187", listen)
	}
	if !allowRemote && !watch.IsLoopbackHost(listen) {
		if host == "" {
			host = "every interface"
		}
		return fail(exitUsage, "pgfence serve: --listen %s is not a loopback address (%s): the endpoints have no authentication; listen on 127.0.0.1 (the default), or add --allow-remote to serve beyond this machine", listen, host)
	}
	switch {
	case interval < 100*time.Millisecond:
		return fail(exitUsage, "pgfence serve: --interval %v is too short: give at least 100ms (every read runs eight queries)", interval)
	case soon <= 0:
		return fail(exitUsage, "pgfence serve: --soon must be positive, e.g. 5s")
	case healthTimeout <= 0:
		return fail(exitUsage, "pgfence serve: --health-timeout must be positive, e.g. 2s")
	case limit < 1 || limit > 10000:
		return fail(exitUsage, "pgfence serve: --limit %d: give 1 to 10000", limit)
	}
	return nil
}
