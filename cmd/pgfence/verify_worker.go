package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	pgf "github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/pgdb"
	"github.com/pgfence/pgfence/pglease"
)

// workerReport is what a worker sends back when its workload is over.
type workerReport struct {
	Worker int            `json:"worker"`
	Owner  string         `json:"owner"`
	Holds  []holdRec      `json:"holds"`
	Errors map[string]int `json:"errors,omitempty"` // by phase: acquire, audit, write, end, release
	// Samples are the first error messages, a few per phase.
	Samples []string `json:"samples,omitempty"`
	Lost    int      `json:"lost"`
}

// holdRec is one grant and what its holder's statements came to.
type holdRec struct {
	ID        string  `json:"id"`
	Key       int     `json:"key"`
	Fence     int64   `json:"fence"`
	AcquireUS int64   `json:"acquire_us"`
	Audit     outcome `json:"audit"`           // the audit row's insert, at the start
	Write     outcome `json:"write,omitempty"` // the fenced write to the resource row
	End       outcome `json:"end,omitempty"`   // the audit row's end
	Lost      bool    `json:"lost,omitempty"`  // the lease was lost before its release
}

// samplesPerPhase is how many error messages a worker keeps per phase.
const samplesPerPhase = 3

type workerState struct {
	cfg    workerConfig
	client *pglease.Client
	db     pgdb.DB
	q      verifySQL

	mu      sync.Mutex
	holds   []holdRec
	errors  map[string]int
	samples []string
	lost    int
}

// verifyWorker is one of verify's worker processes: settings on stdin,
// "ready" on the report pipe (fd 3) once connected, the workload on "go",
// the report when it is over. A closed stdin stops it at any point.
func (a *app) verifyWorker(ctx context.Context) int {
	in := bufio.NewReader(os.Stdin)
	var cfg workerConfig
	line, err := in.ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &cfg)
	}
	report := os.NewFile(3, "verify-report")
	if err != nil || report == nil {
		fmt.Fprintln(a.stderr, "pgfence verify --worker is started by pgfence verify itself, which sends its settings on stdin: run pgfence verify")
		return exitUsage
	}
	defer report.Close()
	abort, cancelAbort := context.WithCancel(ctx)
	defer cancelAbort()
	// Each holder uses one connection at a time; the waiters' listener, if
	// any, keeps one more.
	pool, _, err := a.connectConns(abort, "", int32(cfg.Goroutines+2))
	if err != nil {
		return a.exitCode(err)
	}
	defer pool.Close()
	client, err := a.verifyClient(pool, cfg.Wake)
	if err != nil {
		return a.exitCode(fail(exitUsage, "pgfence verify: %v", err))
	}
	defer client.Close()
	if _, err := io.WriteString(report, "ready\n"); err != nil {
		return exitFailed
	}
	if line, err := in.ReadBytes('\n'); err != nil || string(line) != "go\n" {
		return exitOK // verify stopped before the start
	}
	go func() {
		io.Copy(io.Discard, in)
		cancelAbort()
	}()

	w := &workerState{cfg: cfg, client: client, db: pgdb.Wrap(pool, ""), q: newVerifySQL(cfg.Scratch, cfg.Keys), errors: map[string]int{}}
	run, cancelRun := context.WithTimeout(abort, cfg.Duration)
	var wg sync.WaitGroup
	for g := range cfg.Goroutines {
		wg.Go(func() { w.holder(run, abort, g) })
	}
	wg.Wait()
	cancelRun()
	client.Close()
	if abort.Err() != nil {
		return exitOK
	}
	b, err := json.Marshal(workerReport{Worker: cfg.Worker, Owner: client.Owner(), Holds: w.holds,
		Errors: w.errors, Samples: w.samples, Lost: w.lost})
	if err != nil {
		fmt.Fprintf(a.stderr, "pgfence verify: worker %d: encoding its report: %v\n", cfg.Worker, err)
		return exitFailed
	}
	if _, err := report.Write(append(b, '\n')); err != nil {
		return exitFailed
	}
	return exitOK
}

// holder takes a random key's lease, holds it for one round of writes and
// releases it, again and again until run ends. Its statements run under the
// lease's context, not run's: the last hold completes after run ends.
func (w *workerState) holder(run, abort context.Context, g int) {
	owner := fmt.Sprintf("%s g%d", w.client.Owner(), g)
	for seq := 0; run.Err() == nil; seq++ {
		k := rand.IntN(w.cfg.Keys)
		start := time.Now()
		l, err := w.client.Acquire(run, verifyKey(w.cfg.Run, k), w.cfg.TTL)
		took := time.Since(start)
		if err != nil {
			if run.Err() != nil {
				return
			}
			w.failed("acquire", err)
			pause(run, 100*time.Millisecond)
			continue
		}
		rec := holdRec{ID: fmt.Sprintf("w%d-g%d-%d", w.cfg.Worker, g, seq), Key: k, Fence: l.Fence(), AcquireUS: took.Microseconds()}
		w.hold(abort, l, owner, &rec)
		w.mu.Lock()
		w.holds = append(w.holds, rec)
		if rec.Lost {
			w.lost++
		}
		w.mu.Unlock()
	}
}

// hold is one holder's writes under lease l: the audit row's start, the
// fenced write, the audit row's end; then the release.
func (w *workerState) hold(abort context.Context, l *pglease.Lease, owner string, rec *holdRec) {
	ctx, cancel := context.WithCancel(l.Context())
	stop := context.AfterFunc(abort, cancel)
	defer func() {
		stop()
		cancel()
	}()
	stmt := func(phase, sql string, args ...any) (pgconn.CommandTag, outcome) {
		tag, err := w.db.Exec(ctx, sql, args...)
		if err != nil && !isCtxEnd(abort, err) {
			w.failed(phase, err)
		}
		return tag, outcomeOf(err)
	}
	_, rec.Audit = stmt("audit", w.q.insert, rec.ID, rec.Key, rec.Fence, owner)
	if rec.Audit == outOK {
		pause(ctx, w.cfg.Hold)
		tag, o := stmt("write", w.q.fenced, rec.Key, rec.Fence)
		if o == outOK && tag.RowsAffected() == 0 {
			o = outRefused
		}
		rec.Write = o
		tag, o = stmt("end", w.q.end, rec.ID)
		if o == outOK && tag.RowsAffected() != 1 {
			o = outFailed // the acknowledged audit row is gone: the check says so
		}
		rec.End = o
	}
	rec.Lost = l.Context().Err() != nil
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	if err := l.Release(rctx); err != nil {
		if errors.Is(err, pgf.ErrLeaseLost) {
			rec.Lost = true
		} else {
			w.failed("release", err)
		}
	}
}

func (w *workerState) failed(phase string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errors[phase]++
	if w.errors[phase] <= samplesPerPhase {
		w.samples = append(w.samples, trimErr(phase, err))
	}
}

// pause sleeps for d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
