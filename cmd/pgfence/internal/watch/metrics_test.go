package watch

import (
	"bytes"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/pgfence/pgfence/cmd/pgfence/internal/oddrow"
)

// parse reads an exposition with Prometheus' own text parser.
func parse(t *testing.T, body []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("Prometheus' parser refuses the exposition: %v\n%s", err, body)
	}
	return fams
}

// value returns the value of the point of family name whose labels are
// the given pairs (all of them), and whether there is one.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		if len(got) != len(labels)/2 {
			continue
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			match = match && got[labels[i]] == labels[i+1]
		}
		if !match {
			continue
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		}
	}
	return 0, false
}

// TestExposition: keys and owners with quotes, backslashes, newlines and
// non-ASCII text come back from Prometheus' parser exactly; every family
// has its type; a fence keeps its digits below 2^53.
func TestExposition(t *testing.T) {
	oldest := 12.5
	awkwardKey := "inv \"72\"\\\nnext ünï"
	w := &Watcher{last: &Snapshot{
		Leases: LeaseSummary{Held: 2, ExpiringSoon: 1, List: []Lease{
			{Key: awkwardKey, Owner: `host\1 "a"`, Fence: 1<<44 + 7},
			{Key: "plain", Owner: "b", Fence: 3},
		}},
		Queues: []Queue{{Name: "mail", Counts: map[string]int64{"available": 4, "completed": 1}, OldestRunnableSeconds: &oldest}},
		Stale:  StaleRefusals{Present: true, Count: 3},
		Permits: []PermitKey{{Key: "devices", Permits: 4, InUse: 3},
			{Key: "report", InUse: 2, Waiters: 1}},
		readAt: time.Now(),
	}}
	rec := httptest.NewRecorder()
	NewMetrics(w).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q", ct)
	}
	fams := parse(t, rec.Body.Bytes())
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
		typ    dto.MetricType
	}{
		{"pgfence_serve_database_up", nil, 1, dto.MetricType_GAUGE},
		{"pgfence_leases_held", nil, 2, dto.MetricType_GAUGE},
		{"pgfence_leases_expiring_soon", nil, 1, dto.MetricType_GAUGE},
		{"pgfence_lease_fence", []string{"key", awkwardKey, "owner", `host\1 "a"`}, 1<<44 + 7, dto.MetricType_GAUGE},
		{"pgfence_lease_fence", []string{"key", "plain", "owner", "b"}, 3, dto.MetricType_GAUGE},
		{"pgfence_jobs", []string{"queue", "mail", "state", "available"}, 4, dto.MetricType_GAUGE},
		{"pgfence_jobs", []string{"queue", "mail", "state", "completed"}, 1, dto.MetricType_GAUGE},
		{"pgfence_jobs_oldest_runnable_age_seconds", []string{"queue", "mail"}, 12.5, dto.MetricType_GAUGE},
		{"pgfence_stale_refusals_total", nil, 3, dto.MetricType_COUNTER},
		{"pgfence_permits_in_use", []string{"key", "devices", "kind", "semaphore"}, 3, dto.MetricType_GAUGE},
		{"pgfence_permits", []string{"key", "devices"}, 4, dto.MetricType_GAUGE},
		{"pgfence_permits_in_use", []string{"key", "report", "kind", "shared"}, 2, dto.MetricType_GAUGE},
		{"pgfence_permits_in_use", []string{"key", "report", "kind", "exclusive"}, 0, dto.MetricType_GAUGE},
		{"pgfence_exclusive_waiters", []string{"key", "report"}, 1, dto.MetricType_GAUGE},
	} {
		if v, ok := value(fams, c.name, c.labels...); !ok || v != c.want {
			t.Errorf("%s%q = %v (found %v), want %v", c.name, c.labels, v, ok, c.want)
		}
		if f := fams[c.name]; f != nil && f.GetType() != c.typ {
			t.Errorf("%s is a %v, want %v", c.name, f.GetType(), c.typ)
		}
	}
	if _, ok := value(fams, "pgfence_serve_snapshot_age_seconds"); !ok {
		t.Error("no pgfence_serve_snapshot_age_seconds")
	}
}

// TestExpositionFailedRead: after a failed read only the up gauge is
// written (0); the figures are absent, not stale. Without the stale
// sequence, its counter is absent too.
func TestExpositionFailedRead(t *testing.T) {
	w := &Watcher{last: &Snapshot{Leases: LeaseSummary{Held: 2}, readAt: time.Now()}, lastErr: "connection refused"}
	fams := parse(t, NewMetrics(w).exposition())
	if v, ok := value(fams, "pgfence_serve_database_up"); !ok || v != 0 {
		t.Errorf("pgfence_serve_database_up = %v (found %v), want 0", v, ok)
	}
	if len(fams) != 1 {
		t.Errorf("want the up gauge alone, got %d families", len(fams))
	}
	w = &Watcher{last: &Snapshot{readAt: time.Now()}}
	fams = parse(t, NewMetrics(w).exposition())
	if _, ok := fams["pgfence_stale_refusals_total"]; ok {
		t.Error("the stale counter is there without its sequence")
	}
	if _, ok := fams["pgfence_lease_fence"]; ok {
		t.Error("an empty pgfence_lease_fence family is written")
	}
}

// TestExpositionOddRows: a lease whose expiry is 'infinity' has +Inf time
// left (a value of the format, not a scrape error); a huge fence, keys
// with control characters and bidirectional marks, and invalid UTF-8 (a
// SQL_ASCII database's bytes) still make an exposition Prometheus reads.
func TestExpositionOddRows(t *testing.T) {
	odd := "a\tb\x1b[2J\u200fc\nd"
	w := &Watcher{last: &Snapshot{
		Leases: LeaseSummary{Held: 3, List: []Lease{
			{Key: "forever", Owner: "o", Fence: 5, RemainingSeconds: float64(oddrow.MaxMicros) / 1e6, Flags: []oddrow.Flag{oddrow.ExpiresInfinity}},
			{Key: odd, Owner: "bad\xffbyte", Fence: 1<<63 - 2, RemainingSeconds: 12.5, Flags: []oddrow.Flag{oddrow.FenceHuge}},
			{Key: "plain", Owner: "o", Fence: 7, RemainingSeconds: 3},
		}},
		readAt: time.Now(),
	}}
	fams := parse(t, NewMetrics(w).exposition())
	if v, ok := value(fams, "pgfence_lease_remaining_seconds", "key", "forever", "owner", "o"); !ok || !math.IsInf(v, 1) {
		t.Errorf("an infinite expiry's time left: %v (found %v), want +Inf", v, ok)
	}
	if v, ok := value(fams, "pgfence_lease_remaining_seconds", "key", odd, "owner", "bad\uFFFDbyte"); !ok || v != 12.5 {
		t.Errorf("the odd key's time left: %v (found %v), want 12.5", v, ok)
	}
	if v, ok := value(fams, "pgfence_lease_fence", "key", odd, "owner", "bad\uFFFDbyte"); !ok || v != float64(1<<63-2) {
		t.Errorf("the huge fence: %v (found %v)", v, ok)
	}
	if v, ok := value(fams, "pgfence_lease_remaining_seconds", "key", "plain", "owner", "o"); !ok || v != 3 {
		t.Errorf("a plain lease's time left: %v (found %v), want 3", v, ok)
	}
}
