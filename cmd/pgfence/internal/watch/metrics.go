package watch

import (
	"bytes"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/pgfence/pgfence/cmd/pgfence/internal/oddrow"
)

// Metrics is the /metrics endpoint: the Watcher's latest read in the
// Prometheus text exposition format (version 0.0.4). It is written here,
// not through the OpenTelemetry SDK and its Prometheus exporter, because
// every figure is a gauge (or the one counter) read off one snapshot, and
// those two would link about 80 packages, protobuf among them, into the CLI
// (the CLI links pgx, golang-migrate and the OTel API, nothing heavier).
// The tests parse the output with Prometheus' own parser.
type Metrics struct{ w *Watcher }

// NewMetrics returns the /metrics endpoint for w.
func NewMetrics(w *Watcher) *Metrics { return &Metrics{w: w} }

// ServeHTTP writes the exposition of the latest read.
func (m *Metrics) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	rw.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	rw.Write(m.exposition())
}

// exposition writes the families listed in the package documentation. A
// family without points is left out whole: figures of a failed read are
// absent, not stale, and so is the stale-refusal counter where the
// database has no sequence for it.
func (m *Metrics) exposition() []byte {
	s, age, errText := m.w.Latest()
	var e expo
	up := 1.0
	if errText != "" {
		up = 0
	}
	e.family("pgfence_serve_database_up", "gauge", "1 when the latest read of the database succeeded, 0 when it failed",
		point{value: up})
	if s == nil || errText != "" {
		return e.b.Bytes()
	}
	e.family("pgfence_serve_snapshot_age_seconds", "gauge", "Age of the snapshot the other figures come from",
		point{value: age.Seconds()})
	e.family("pgfence_leases_held", "gauge", "Leases unexpired by the database clock",
		point{value: float64(s.Leases.Held)})
	e.family("pgfence_leases_expiring_soon", "gauge", "Held leases that expire within the --soon horizon (default 5s) unless renewed",
		point{value: float64(s.Leases.ExpiringSoon)})
	var fences, remaining []point
	for _, l := range s.Leases.List {
		labels := []string{"key", l.Key, "owner", l.Owner}
		// A float64 holds a fence exactly below 2^53, i.e. for WAL
		// timelines below 512.
		fences = append(fences, point{labels: labels, value: float64(l.Fence)})
		// An expiry of 'infinity' is +Inf, a value the format has (and
		// PromQL compares): the saturated 292 years of the JSON would pass
		// for a real expiry.
		left := l.RemainingSeconds
		if slices.Contains(l.Flags, oddrow.ExpiresInfinity) {
			left = math.Inf(1)
		}
		remaining = append(remaining, point{labels: labels, value: left})
	}
	e.family("pgfence_lease_fence", "gauge", "Fence of a held lease, by key and owner; at most --limit keys (default 100), the first in key order",
		fences...)
	e.family("pgfence_lease_remaining_seconds", "gauge", "Time left of a held lease by the database clock, by key and owner (+Inf: its expiry is infinity); the keys of pgfence_lease_fence",
		remaining...)
	var jobs, oldest []point
	for _, q := range s.Queues {
		for _, state := range slices.Sorted(maps.Keys(q.Counts)) {
			jobs = append(jobs, point{labels: []string{"queue", q.Name, "state", state}, value: float64(q.Counts[state])})
		}
		if q.OldestRunnableSeconds != nil {
			oldest = append(oldest, point{labels: []string{"queue", q.Name}, value: *q.OldestRunnableSeconds})
		}
	}
	e.family("pgfence_jobs", "gauge", "Rows of pgfence_jobs by queue and state", jobs...)
	e.family("pgfence_jobs_oldest_runnable_age_seconds", "gauge", "How long the oldest runnable job of a queue has been runnable, by the database clock",
		oldest...)
	var inUse, capacity, waiters []point
	for _, p := range s.Permits {
		kind := "semaphore"
		if p.Permits == 0 {
			kind = "shared"
			inUse = append(inUse, point{labels: []string{"key", p.Key, "kind", "exclusive"}, value: float64(p.Exclusive)})
			waiters = append(waiters, point{labels: []string{"key", p.Key}, value: float64(p.Waiters)})
		} else {
			capacity = append(capacity, point{labels: []string{"key", p.Key}, value: float64(p.Permits)})
		}
		inUse = append(inUse, point{labels: []string{"key", p.Key, "kind", kind}, value: float64(p.InUse)})
	}
	e.family("pgfence_permits_in_use", "gauge", "Unexpired permits of a semaphore (kind semaphore), shared leases (kind shared) and the exclusive lease (kind exclusive) of a key, by the database clock; at most --limit keys",
		inUse...)
	e.family("pgfence_permits", "gauge", "Number of permits of a held semaphore key", capacity...)
	e.family("pgfence_exclusive_waiters", "gauge", "Exclusive waiters of a shared/exclusive key: while one waits, no new shared lease is granted",
		waiters...)
	var depth []point
	for _, w := range s.Waiters {
		if w.Position == 0 { // one point per queue: its first waiter carries the depth
			depth = append(depth, point{labels: []string{"key", w.Key, "kind", w.Kind}, value: float64(w.Depth)})
		}
	}
	e.family("pgfence_queue_waiters", "gauge", "Fair waiters in a key's queue, by key and kind asked for (exclusive, shared, permit); keys of the first --limit waiters",
		depth...)
	if s.Stale.Present {
		e.family("pgfence_stale_refusals_total", "counter", "Stale writes refused by the fencing trigger (sequence pgfence_stale_refusals); absent when the sequence is",
			point{value: float64(s.Stale.Count)})
	}
	return e.b.Bytes()
}

// point is one line of a family: label name/value pairs and the value.
type point struct {
	labels []string
	value  float64
}

// expo accumulates the text exposition.
type expo struct{ b bytes.Buffer }

// family writes the HELP and TYPE lines and the points of one metric, or
// nothing when there are none.
func (e *expo) family(name, typ, help string, points ...point) {
	if len(points) == 0 {
		return
	}
	e.b.WriteString("# HELP " + name + " " + helpEscaper.Replace(help) + "\n")
	e.b.WriteString("# TYPE " + name + " " + typ + "\n")
	for _, p := range points {
		e.b.WriteString(name)
		for i := 0; i+1 < len(p.labels); i += 2 {
			if i == 0 {
				e.b.WriteByte('{')
			} else {
				e.b.WriteByte(',')
			}
			e.b.WriteString(p.labels[i] + `="` + labelEscaper.Replace(strings.ToValidUTF8(p.labels[i+1], "\uFFFD")) + `"`)
		}
		if len(p.labels) > 0 {
			e.b.WriteByte('}')
		}
		e.b.WriteString(" " + formatValue(p.value) + "\n")
	}
}

// The format's escapes: in HELP, backslash and newline; in a label value,
// the double quote too. Keys and owners are the users' own strings, and
// may carry any other character (a label value is UTF-8, so the invalid
// bytes a SQL_ASCII database may hold are replaced, not a scrape error).
var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

// formatValue writes v as the format spells it (+Inf, -Inf, NaN).
func formatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
