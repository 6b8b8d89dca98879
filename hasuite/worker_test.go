package hasuite

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/pgguard"
	"github.com/pgfence/pgfence/pglease"
)

// The worker: a client process the suite starts by re-executing its own
// test binary with these variables set. It takes leases until its stdin
// closes, and writes one line per lease and a summary to stdout.
const (
	workerEnv    = "HASUITE_WORKER"
	workerDSNEnv = "HASUITE_DSN"

	numKeys     = 50
	goroutines  = 6
	leaseTTL    = 3 * time.Second
	callTimeout = 5 * time.Second // each call's context: two hosts' connect_timeout and a round trip
	// callSlack is how far past its context's deadline a call may return.
	callSlack = 500 * time.Millisecond
)

// leaseRec is one lease as its holder saw it: granted at Got, its guarded
// write and audit row acknowledged at Ack (0: not acknowledged), relied on
// until End (before its release, or its local deadline if earlier). Times
// are Unix nanoseconds of this machine's clock, which every process shares.
type leaseRec struct {
	Worker string `json:"w"`
	Key    string `json:"k"`
	Fence  int64  `json:"f"`
	Got    int64  `json:"g"`
	Ack    int64  `json:"a"`
	End    int64  `json:"e"`
}

// summary is a worker's counts at exit.
type summary struct {
	Worker      string `json:"w"`
	Tries       int64  `json:"tries"`
	Grants      int64  `json:"grants"`
	Acks        int64  `json:"acks"`
	Refused     int64  `json:"refused"`
	Stale       int64  `json:"stale"` // grants refused for an older timeline
	Errors      int64  `json:"errors"`
	OverBound   int64  `json:"over"` // calls that returned later than their context's deadline + callSlack
	MaxCallNano int64  `json:"max"`
	LastErr     string `json:"lastErr"`
}

type workerState struct {
	name   string
	client *pglease.Client
	pool   *pgxpool.Pool
	guard  *pgguard.Guard
	out    *json.Encoder
	outMu  sync.Mutex
	sum    summary
	maxMu  sync.Mutex
	stop   atomic.Bool
	errMu  sync.Mutex
}

// workerMain runs one worker; its exit code is the process's.
func workerMain(name string) int {
	w := &workerState{name: name, out: json.NewEncoder(os.Stdout)}
	w.sum.Worker = name
	if err := w.open(); err != nil {
		fmt.Fprintln(os.Stderr, "worker", name, err)
		return 1
	}
	go func() { // the suite closes stdin to stop the worker
		bufio.NewReader(os.Stdin).ReadString('\n')
		w.stop.Store(true)
	}()
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(w.loop)
	}
	wg.Wait()
	w.client.Close()
	w.pool.Close()
	w.emit("S", w.sum)
	return 0
}

// open connects, retrying for 30 s: a worker may start while the cluster
// has no primary.
func (w *workerState) open() error {
	cfg, err := pgxpool.ParseConfig(os.Getenv(workerDSNEnv))
	if err != nil {
		return err
	}
	cfg.MaxConns = goroutines + 2
	// pgxpool's other defaults stay: a connection lives up to an hour, so a
	// pooled connection to a paused primary stays in use after a failover.
	ctx := context.Background()
	if w.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return err
	}
	if w.client, err = pglease.New(w.pool, pglease.WithOwner(w.name)); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		gctx, cancel := context.WithTimeout(ctx, callTimeout)
		w.guard, err = pgguard.NewGuard(gctx, w.pool, pgguard.Table{Name: "ha_items", KeyColumn: "key"})
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (w *workerState) emit(kind string, v any) {
	w.outMu.Lock()
	defer w.outMu.Unlock()
	fmt.Fprint(os.Stdout, kind, " ")
	w.out.Encode(v)
}

// timed runs one call with a callTimeout context and counts it over its
// bound if it returned later than the deadline plus callSlack.
func (w *workerState) timed(parent context.Context, call func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(parent, callTimeout)
	defer cancel()
	start := time.Now()
	err := call(ctx)
	d := time.Since(start)
	w.maxMu.Lock()
	w.sum.MaxCallNano = max(w.sum.MaxCallNano, int64(d))
	if d > callTimeout+callSlack {
		w.sum.OverBound++
	}
	w.maxMu.Unlock()
	return err
}

func (w *workerState) count(p *int64) {
	w.maxMu.Lock()
	*p++
	w.maxMu.Unlock()
}

func (w *workerState) failed(err error) {
	w.count(&w.sum.Errors)
	w.errMu.Lock()
	w.sum.LastErr = err.Error()
	w.errMu.Unlock()
}

func (w *workerState) loop() {
	for !w.stop.Load() {
		w.once(fmt.Sprintf("k%02d", rand.IntN(numKeys)))
	}
}

// once takes key, writes under it, and gives it back.
func (w *workerState) once(key string) {
	bg := context.Background()
	var l *pglease.Lease
	w.count(&w.sum.Tries)
	err := w.timed(bg, func(ctx context.Context) (err error) {
		l, err = w.client.TryAcquire(ctx, key, leaseTTL)
		return err
	})
	switch {
	case errors.Is(err, pgfence.ErrNotAcquired):
		w.count(&w.sum.Refused)
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		return
	case errors.Is(err, pgfence.ErrStaleTimeline):
		w.count(&w.sum.Stale)
		time.Sleep(100 * time.Millisecond)
		return
	case err != nil:
		w.failed(err)
		time.Sleep(100 * time.Millisecond)
		return
	}
	w.count(&w.sum.Grants)
	rec := leaseRec{Worker: w.name, Key: key, Fence: l.Fence(), Got: time.Now().UnixNano()}
	err = w.timed(l.Context(), func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
			if err := w.guard.Update(ctx, tx, key, l.Fence(), pgguard.Values{"n": l.Fence()}); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO ha_audit (key, fence, worker) VALUES ($1, $2, $3)", key, l.Fence(), w.name)
			return err
		})
	})
	if err == nil {
		rec.Ack = time.Now().UnixNano()
		w.count(&w.sum.Acks)
	} else {
		w.failed(err)
	}
	time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond) // the work the lease protects
	rec.End = min(time.Now().UnixNano(), l.Deadline().UnixNano())
	if err := w.timed(bg, l.Release); err != nil && !errors.Is(err, pgfence.ErrLeaseLost) {
		w.failed(err)
	}
	w.emit("L", rec)
}
