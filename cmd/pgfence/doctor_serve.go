package main

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// doctorWatch is serve's diagnosis: doctor's findings, read again every
// interval in the background (a diagnosis counts the lease table, so it
// runs far less often than the page's state), and kept for the page's
// /api/doctor.
type doctorWatch struct {
	app      *app
	pool     *pgxpool.Pool
	where    string
	opts     doctorOpts
	interval time.Duration

	mu     sync.Mutex
	report *doctorReport
	readAt time.Time
	err    string // the latest diagnosis's failure, "" when it succeeded
}

// doctorState is /api/doctor's answer.
type doctorState struct {
	// OK: the latest diagnosis ran (its findings may still warn or fail).
	OK              bool    `json:"ok"`
	Error           string  `json:"error,omitempty"`
	AgeSeconds      float64 `json:"age_seconds"`      // since the report was read; 0 without one
	IntervalSeconds float64 `json:"interval_seconds"` // between two diagnoses
	// Report is the latest successful diagnosis, null before the first.
	Report *doctorReport `json:"report"`
}

// run diagnoses now and then every interval until ctx ends.
func (w *doctorWatch) run(ctx context.Context) {
	for {
		w.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(w.interval):
		}
	}
}

func (w *doctorWatch) refresh(ctx context.Context) {
	rep, err := w.app.diagnose(ctx, w.pool, w.where, w.opts)
	if ctx.Err() != nil {
		return // stopping: not a failure of the database
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.err = w.app.scrub.String(err.Error())
		return
	}
	w.report, w.readAt, w.err = rep, time.Now(), ""
}

// state is the latest diagnosis for /api/doctor.
func (w *doctorWatch) state() any {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := doctorState{OK: w.err == "" && w.report != nil, Error: w.err, IntervalSeconds: w.interval.Seconds(), Report: w.report}
	if w.report != nil {
		s.AgeSeconds = time.Since(w.readAt).Seconds()
	}
	return s
}
