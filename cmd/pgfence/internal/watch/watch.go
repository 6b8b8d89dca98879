package watch

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/cmd/pgfence/internal/oddrow"
	"github.com/pgfence/pgfence/internal/fencesql"
	"github.com/pgfence/pgfence/internal/pgdb"
	"github.com/pgfence/pgfence/internal/pgerr"
)

// Options configures a Watcher. The zero value of each field means its
// default.
type Options struct {
	// Interval is the time between two reads of the database. Default 2s.
	// Every page, JSON and /metrics request is served from the latest read,
	// so the load on the database does not grow with the number of viewers
	// or scrapers.
	Interval time.Duration
	// Soon is the horizon of "expiring soon". Default 5s.
	Soon time.Duration
	// Limit bounds the held leases listed per read (and so the series of
	// pgfence_lease_fence), and the queues reported. Default 100.
	Limit int
	// ReadTimeout bounds one read of the database. Default 5s.
	ReadTimeout time.Duration
	// Scrub removes secrets from error texts before they are shown. Default:
	// the text unchanged.
	Scrub func(string) string
	// Schema is the schema of the pgfence objects to watch (migrated with
	// migrations.WithSchema); "" finds them through the search_path. The
	// caller validates it (validate.Identifier).
	Schema string
}

func (o *Options) fill() {
	if o.Interval <= 0 {
		o.Interval = 2 * time.Second
	}
	if o.Soon <= 0 {
		o.Soon = 5 * time.Second
	}
	if o.Limit <= 0 {
		o.Limit = 100
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = 5 * time.Second
	}
	if o.Scrub == nil {
		o.Scrub = func(s string) string { return s }
	}
}

// historyWindow is how far back stale-refusal samples are kept; the page
// shows the change over 1, 5 and 15 minutes.
const historyWindow = 15 * time.Minute

// Watcher reads pgfence's tables every Interval and keeps the latest
// snapshot. Its methods are safe for concurrent use.
type Watcher struct {
	pool *pgxpool.Pool
	opts Options

	mu      sync.Mutex
	last    *Snapshot // the latest successful read; nil before the first
	lastErr string    // why the latest read failed; "" when it succeeded
	tried   time.Time // when the latest read was attempted (monotonic)
	samples []sample  // stale-refusal counts, oldest first
}

type sample struct {
	at    time.Time // monotonic
	count int64
}

// New returns a Watcher on pool. Call Run to start reading.
func New(pool *pgxpool.Pool, opts Options) *Watcher {
	opts.fill()
	return &Watcher{pool: pool, opts: opts}
}

// Run reads the database every Interval until ctx ends. The first read is
// one Interval after the call: call Refresh first to read at once.
func (w *Watcher) Run(ctx context.Context) {
	t := time.NewTicker(w.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.Refresh(ctx)
		}
	}
}

// Refresh reads the database once, records the outcome and returns the
// read's error, if any.
func (w *Watcher) Refresh(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, w.opts.ReadTimeout)
	defer cancel()
	s, err := w.read(rctx)
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tried = now
	if err != nil {
		if ctx.Err() != nil {
			return err // shutting down: not a database failure
		}
		w.lastErr = w.opts.Scrub(err.Error())
		return err
	}
	w.lastErr = ""
	s.readAt = now
	w.last = s
	if s.Stale.Present {
		w.samples = append(w.samples, sample{at: now, count: s.Stale.Count})
		cut := 0
		for cut < len(w.samples)-1 && now.Sub(w.samples[cut+1].at) >= historyWindow {
			cut++ // keep one sample at or beyond the window as its baseline
		}
		w.samples = w.samples[cut:]
	} else {
		w.samples = nil
	}
	return nil
}

// read takes one snapshot in one read-only REPEATABLE READ transaction, so
// every figure is of the same instant (now() is the same in each statement).
func (w *Watcher) read(ctx context.Context) (*Snapshot, error) {
	tx, err := w.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	q := fencesql.New(pgdb.Wrap(tx, w.opts.Schema))
	limit := int32(w.opts.Limit)

	sum, err := q.WatchLeaseSummary(ctx, w.opts.Soon.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("read lock_leases: %w", err)
	}
	held, err := q.WatchHeldLeases(ctx, limit)
	if err != nil {
		return nil, fmt.Errorf("read lock_leases: %w", err)
	}
	// Four states per queue at most: 4*limit groups cover limit queues.
	counts, err := q.WatchJobCounts(ctx, 4*limit)
	if err != nil {
		return nil, fmt.Errorf("read pgfence_jobs: %w", err)
	}
	oldest, err := q.WatchOldestRunnable(ctx, limit)
	if err != nil {
		return nil, fmt.Errorf("read pgfence_jobs: %w", err)
	}
	seq := "pgfence_stale_refusals"
	if w.opts.Schema != "" {
		seq = pgx.Identifier{w.opts.Schema, seq}.Sanitize()
	}
	stale, err := q.WatchStaleRefusals(ctx, seq)
	if err != nil {
		return nil, fmt.Errorf("read pgfence_stale_refusals: %w", err)
	}

	// Last: on a schema from before semaphores, the read fails (and ends
	// the transaction), and the snapshot has no permits rather than none.
	permits, err := q.WatchPermits(ctx, limit)
	if err != nil && !pgerr.IsUndefined(err) {
		return nil, fmt.Errorf("read pgfence_permits: %w", err)
	}
	var holders []fencesql.WatchPermitHoldersRow
	var waiters []fencesql.WatchWaitersRow
	if err == nil {
		// A key's holders are at most its permits (a shared key's, any
		// number): limit rows cover the first keys, not always limit keys.
		if holders, err = q.WatchPermitHolders(ctx, limit); err != nil {
			return nil, fmt.Errorf("read pgfence_permits: %w", err)
		}
		// On a schema from before the fair queues of every kind, the read
		// fails (the last one, again): no waiters are shown.
		if waiters, err = q.WatchWaiters(ctx, limit); err != nil && !pgerr.IsUndefined(err) {
			return nil, fmt.Errorf("read the fair waiters: %w", err)
		}
	}

	s := &Snapshot{
		Permits: []PermitKey{},
		DBNow:   sum.DbNow.UTC(),
		Leases:  LeaseSummary{Held: sum.Held, ExpiringSoon: sum.ExpiringSoon, SoonSeconds: w.opts.Soon.Seconds(), Limit: w.opts.Limit, List: []Lease{}},
		Queues:  queues(counts, oldest, w.opts.Limit),
		Stale:   StaleRefusals{Present: stale.Present, Count: stale.Refusals},
	}
	for _, l := range held {
		flags := oddrow.Row{Key: l.LockKey, Fence: l.Fence, Acquired: l.AcquiredAt, Expires: l.ExpiresAt,
			RemainingMicros: l.RemainingMicros, Now: sum.DbNow}.Flags()
		s.note(flags)
		s.Leases.List = append(s.Leases.List, Lease{
			Key: l.LockKey, Owner: l.Owner, Fence: l.Fence, FenceText: strconv.FormatInt(l.Fence, 10),
			RemainingSeconds: float64(l.RemainingMicros) / 1e6, ExpiresAt: oddrow.Time{Time: l.ExpiresAt.UTC()}, Flags: flags,
		})
	}
	byKey := map[string][]PermitHolder{}
	for _, h := range holders {
		flags := oddrow.Row{Key: h.LockKey, Fence: h.Fence, RemainingMicros: h.RemainingMicros, Now: sum.DbNow}.Flags()
		s.note(flags)
		byKey[h.LockKey] = append(byKey[h.LockKey], PermitHolder{Slot: int(h.Slot), Exclusive: h.Exclusive, Owner: h.Owner,
			Fence: h.Fence, FenceText: strconv.FormatInt(h.Fence, 10), RemainingSeconds: float64(h.RemainingMicros) / 1e6, Flags: flags})
	}
	for _, p := range permits {
		s.Permits = append(s.Permits, PermitKey{Key: p.LockKey, Permits: int(p.Permits), InUse: p.InUse,
			Exclusive: p.ExclusiveHeld, Waiters: p.Waiters, Holders: append([]PermitHolder{}, byKey[p.LockKey]...)})
	}
	s.Waiters = []Waiter{}
	for _, w := range waiters {
		flags := oddrow.WaiterFlags(w.LockKey, time.Time{}, w.PlaceMicros)
		s.note(flags)
		s.Waiters = append(s.Waiters, Waiter{Key: w.LockKey, Kind: w.Kind, Owner: w.Owner, Position: w.Position,
			Depth: w.Depth, PlaceSeconds: float64(w.PlaceMicros) / 1e6, Flags: flags})
	}
	return s, nil
}

// note adds flags' explanations to s.FlagNotes.
func (s *Snapshot) note(flags []oddrow.Flag) {
	for _, f := range flags {
		if s.FlagNotes == nil {
			s.FlagNotes = map[oddrow.Flag]string{}
		}
		s.FlagNotes[f] = f.Note()
	}
}

// queues folds the per-(queue, state) counts and the per-queue oldest
// runnable age into one row per queue, in queue order, at most limit rows.
func queues(counts []fencesql.WatchJobCountsRow, oldest []fencesql.WatchOldestRunnableRow, limit int) []Queue {
	out := []Queue{}
	index := map[string]int{}
	for _, c := range counts {
		i, ok := index[c.Queue]
		if !ok {
			if len(out) == limit {
				continue
			}
			i = len(out)
			index[c.Queue] = i
			out = append(out, Queue{Name: c.Queue, Counts: map[string]int64{}})
		}
		out[i].Counts[c.State] = c.Jobs
	}
	for _, o := range oldest {
		if i, ok := index[o.Queue]; ok {
			age := float64(o.AgeMicros) / 1e6
			out[i].OldestRunnableSeconds = &age
		}
	}
	return out
}

// Snapshot is one read of the database, as served by /api/state.
type Snapshot struct {
	// DBNow is the database's now() at the read: every time left and age is
	// measured against it, never against this machine's clock.
	DBNow  time.Time     `json:"db_now"`
	Leases LeaseSummary  `json:"leases"`
	Queues []Queue       `json:"queues"`
	Stale  StaleRefusals `json:"stale_refusals"`
	// Permits are the semaphore and shared/exclusive keys held or waited
	// for, at most Limit of them in key order.
	Permits []PermitKey `json:"permits"`
	// Waiters are the fair waiters of every kind, by key and in queue
	// order, at most Limit of them.
	Waiters []Waiter `json:"waiters"`
	// FlagNotes explain the flags of the rows above (oddrow): what is
	// unusual about a row pgfence's clients do not write. Absent when no
	// row has a flag.
	FlagNotes map[oddrow.Flag]string `json:"flag_notes,omitempty"`
	readAt    time.Time              // monotonic, for the snapshot's age
}

// Waiter is one fair waiter in a snapshot.
type Waiter struct {
	Key string `json:"key"`
	// Kind is the kind the waiter asked for: "exclusive" (a plain lease),
	// "shared" or "permit".
	Kind     string `json:"kind"`
	Owner    string `json:"owner"`
	Position int64  `json:"position"` // 0 first
	// Depth is the number of waiters in the key's queue.
	Depth        int64   `json:"depth"`
	PlaceSeconds float64 `json:"place_seconds"` // how long its place lasts without a refresh
	// Flags say what is unusual about the row (FlagNotes explain them).
	Flags []oddrow.Flag `json:"flags,omitempty"`
}

// PermitHolder is one held permit, or shared or exclusive lease, of a key.
type PermitHolder struct {
	Slot      int    `json:"slot"`
	Exclusive bool   `json:"exclusive"`
	Owner     string `json:"owner"`
	Fence     int64  `json:"fence"`
	// FenceText is the fence in decimal, exact in JavaScript too.
	FenceText        string  `json:"fence_text"`
	RemainingSeconds float64 `json:"remaining_seconds"`
	// Flags say what is unusual about the row (Snapshot.FlagNotes).
	Flags []oddrow.Flag `json:"flags,omitempty"`
}

// PermitKey is one semaphore or shared/exclusive key in a snapshot.
type PermitKey struct {
	Key string `json:"key"`
	// Permits is the semaphore's number of permits; 0 for a shared/exclusive key.
	Permits int `json:"permits"`
	// InUse counts the unexpired permits, or shared leases.
	InUse int64 `json:"in_use"`
	// Exclusive is 1 while the exclusive lease of a shared/exclusive key is held.
	Exclusive int64 `json:"exclusive"`
	// Waiters counts the exclusive waiters whose place has not expired.
	Waiters int64 `json:"exclusive_waiters"`
	// Holders are the held permits or leases, by slot (the first of them,
	// within Limit rows over all keys).
	Holders []PermitHolder `json:"holders"`
}

// LeaseSummary is the lease side of a snapshot.
type LeaseSummary struct {
	Held         int64   `json:"held"`          // leases unexpired by the database clock
	ExpiringSoon int64   `json:"expiring_soon"` // of those, expiring within SoonSeconds
	SoonSeconds  float64 `json:"soon_seconds"`
	Limit        int     `json:"limit"` // List holds at most this many leases, in key order
	List         []Lease `json:"list"`
}

// Lease is one held lease.
type Lease struct {
	Key   string `json:"key"`
	Owner string `json:"owner"`
	Fence int64  `json:"-"`
	// FenceText is the fence in decimal: a JSON number above 2^53 would lose
	// digits in JavaScript, and fences carry the WAL timeline in bit 44 up.
	FenceText string `json:"fence"`
	// RemainingSeconds is at DBNow. An infinite expiry's is the saturated
	// time left of the queries (oddrow.MaxMicros, about 292 years), a JSON
	// number still; Flags says it is infinite.
	RemainingSeconds float64 `json:"remaining_seconds"`
	// ExpiresAt is RFC 3339, or "infinity" (oddrow.Time).
	ExpiresAt oddrow.Time `json:"expires_at"`
	// Flags say what is unusual about the row (Snapshot.FlagNotes).
	Flags []oddrow.Flag `json:"flags,omitempty"`
}

// Queue is one queue of pgfence_jobs.
type Queue struct {
	Name   string           `json:"queue"`
	Counts map[string]int64 `json:"counts"` // by state; a state without jobs is absent
	// OldestRunnableSeconds is how long the oldest runnable job (available,
	// run_at passed) has been runnable, at DBNow; nil when none is.
	OldestRunnableSeconds *float64 `json:"oldest_runnable_seconds"`
}

// StaleRefusals is the count of stale writes refused by the fencing trigger.
type StaleRefusals struct {
	// Present is false when the database has no pgfence_stale_refusals
	// sequence: the count is unknown, not zero.
	Present bool  `json:"present"`
	Count   int64 `json:"count"`
	// Changes is the change of Count over the last 1, 5 and 15 minutes, as
	// far back as this serve process has read it.
	Changes []Change `json:"changes"`
}

// Change is the change of the stale-refusal count over a window.
type Change struct {
	WindowSeconds float64 `json:"window_seconds"`
	// CoveredSeconds is the time Delta is measured over: from the newest
	// read at least WindowSeconds old (so a little more than the window, by
	// up to one interval), or less than the window while serve has run for
	// less than it.
	CoveredSeconds float64 `json:"covered_seconds"`
	Delta          int64   `json:"delta"`
}

// State is what /api/state returns: the latest snapshot and how it was
// read.
type State struct {
	Database string `json:"database"` // user@host:port/db, never a password
	// OK is false when the latest read failed; Error says why, and the
	// figures are those of the latest successful read, if any.
	OK    bool      `json:"ok"`
	Error string    `json:"error,omitempty"`
	Data  *Snapshot `json:"data"`
	// AgeSeconds is how old Data is; the page subtracts it from each
	// lease's time left.
	AgeSeconds      float64 `json:"age_seconds"`
	IntervalSeconds float64 `json:"interval_seconds"`
}

// Latest returns the latest snapshot (nil before the first successful
// read), its age, and why the latest read failed ("" if it did not).
func (w *Watcher) Latest() (*Snapshot, time.Duration, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last == nil {
		if w.lastErr == "" && w.tried.IsZero() {
			return nil, 0, "no read of the database yet"
		}
		return nil, 0, w.lastErr
	}
	s := *w.last
	s.Stale.Changes = w.changes(time.Now())
	return &s, time.Since(w.last.readAt), w.lastErr
}

// changes computes the stale-refusal deltas from the samples. Caller holds
// w.mu.
func (w *Watcher) changes(now time.Time) []Change {
	if len(w.samples) == 0 {
		return []Change{}
	}
	cur := w.samples[len(w.samples)-1]
	var out []Change
	for _, win := range []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute} {
		base := w.samples[0]
		for _, s := range w.samples {
			if now.Sub(s.at) < win {
				break
			}
			base = s // the newest sample at least win old
		}
		out = append(out, Change{WindowSeconds: win.Seconds(), CoveredSeconds: now.Sub(base.at).Seconds(), Delta: cur.count - base.count})
	}
	return out
}

// State returns the latest snapshot as /api/state serves it.
func (w *Watcher) State(database string) State {
	s, age, errText := w.Latest()
	return State{Database: database, OK: errText == "", Error: errText, Data: s,
		AgeSeconds: age.Seconds(), IntervalSeconds: w.opts.Interval.Seconds()}
}
