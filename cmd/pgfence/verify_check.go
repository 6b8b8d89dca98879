package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// verifyResult is verify's verdict with its figures, as --json prints it.
type verifyResult struct {
	Run             string  `json:"run"`
	Database        string  `json:"database"`
	Scratch         string  `json:"scratch_schema"`
	Processes       int     `json:"processes"`
	Goroutines      int     `json:"goroutines"`
	Keys            int     `json:"keys"`
	DurationSeconds float64 `json:"duration_seconds"`
	TTLSeconds      float64 `json:"ttl_seconds"`
	HoldSeconds     float64 `json:"hold_seconds"`
	// Waiters says how waiters learnt of a release: woken (LISTEN) or
	// polling (behind a transaction pooler).
	Waiters string `json:"waiters"`

	Grants          int     `json:"grants"`
	GrantsPerSecond float64 `json:"grants_per_second"`
	// AcquireMs is the time Acquire took, as the workers measured it.
	AcquireMs latency `json:"acquire_ms"`
	// HandoffMs is, per key, a holder's end to the next holder's start in
	// the audit record (database clock): the release and the next grant lie
	// in between.
	HandoffMs    latency `json:"handoff_ms"`
	AuditWrites  writes  `json:"audit_writes"`
	FencedWrites writes  `json:"fenced_writes"`
	LostLeases   int     `json:"lost_leases"`
	Errors       int     `json:"errors"`
	// ErrorsByPhase counts errors by the step that met them: acquire,
	// audit (the audit row's insert), write (the fenced write), end (the
	// audit row's end), release.
	ErrorsByPhase map[string]int `json:"errors_by_phase,omitempty"`
	ErrorSamples  []string       `json:"error_samples,omitempty"`

	Checks  []check `json:"checks"`
	Pass    bool    `json:"pass"`
	Verdict string  `json:"verdict"` // PASS or FAIL
}

type latency struct {
	P50     float64 `json:"p50"`
	P99     float64 `json:"p99"`
	Max     float64 `json:"max"`
	Samples int     `json:"samples"`
}

// writes counts statements by outcome: acknowledged, refused (a fenced
// write that met a newer fence), failed (not applied) and unknown (no
// answer: it may or may not have been applied).
type writes struct {
	Acknowledged int `json:"acknowledged"`
	Refused      int `json:"refused"`
	Failed       int `json:"failed"`
	Unknown      int `json:"unknown"`
}

func (w *writes) add(o outcome) {
	switch o {
	case outOK:
		w.Acknowledged++
	case outRefused:
		w.Refused++
	case outFailed:
		w.Failed++
	case outUnknown:
		w.Unknown++
	}
}

type check struct {
	Name   string `json:"name"`
	Pass   bool   `json:"pass"`
	Detail string `json:"detail"`
}

// The checks, by name.
const (
	checkWorkload = "workload"
	checkOverlap  = "overlap"
	checkOrder    = "fence order"
	checkAcked    = "acked writes"
	checkFenced   = "fenced writes"
)

// judge checks the database's record (the audit and resource rows) against
// what the workers were told (their reports).
func judge(o verifyOpts, reports []workerReport, audit []auditRow, resource []resourceRow) verifyResult {
	r := verifyResult{Processes: o.processes, Goroutines: o.goroutines, Keys: o.keys,
		DurationSeconds: o.duration.Seconds(), TTLSeconds: o.ttl.Seconds(), HoldSeconds: o.hold.Seconds(),
		ErrorsByPhase: map[string]int{}}
	var holds []holdRec
	for _, rep := range reports {
		holds = append(holds, rep.Holds...)
		r.LostLeases += rep.Lost
		for phase, n := range rep.Errors {
			r.ErrorsByPhase[phase] += n
			r.Errors += n
		}
		r.ErrorSamples = append(r.ErrorSamples, rep.Samples...)
	}
	r.Grants = len(holds)
	r.GrantsPerSecond = float64(r.Grants) / o.duration.Seconds()
	acquire := make([]time.Duration, 0, len(holds))
	complete := 0
	for _, h := range holds {
		acquire = append(acquire, time.Duration(h.AcquireUS)*time.Microsecond)
		r.AuditWrites.add(h.Audit)
		r.AuditWrites.add(h.End)
		r.FencedWrites.add(h.Write)
		if h.Audit == outOK && h.End == outOK {
			complete++
		}
	}
	r.AcquireMs = percentiles(acquire)

	byKey := map[int][]auditRow{}
	for _, a := range audit {
		byKey[a.key] = append(byKey[a.key], a)
	}
	keys := make([]int, 0, len(byKey))
	for k, rows := range byKey {
		keys = append(keys, k)
		sort.SliceStable(rows, func(i, j int) bool { return rows[i].started.Before(rows[j].started) })
	}
	slices.Sort(keys)

	// The run itself: a check of nothing proves nothing.
	wl := check{Name: checkWorkload, Pass: complete > 0}
	if wl.Pass {
		wl.Detail = fmt.Sprintf("%d grants, %d holds recorded from start to end", r.Grants, complete)
	} else {
		wl.Detail = fmt.Sprintf("%d grants, none recorded from start to end: nothing to check", r.Grants)
		if len(r.ErrorSamples) > 0 {
			wl.Detail += " (first error: " + r.ErrorSamples[0] + ")"
		}
	}

	r.Checks = []check{wl, checkOverlaps(keys, byKey, &r), checkFenceOrder(keys, byKey), checkAckedWrites(holds, audit, resource), checkRefused(r.FencedWrites)}
	r.Pass = true
	for _, c := range r.Checks {
		r.Pass = r.Pass && c.Pass
	}
	r.Verdict = "FAIL"
	if r.Pass {
		r.Verdict = "PASS"
	}
	if len(r.ErrorsByPhase) == 0 {
		r.ErrorsByPhase = nil
	}
	return r
}

// checkOverlaps finds, per key, a holder that started before an earlier
// holder of the key ended, and measures the hand-offs between holders that
// did not overlap.
func checkOverlaps(keys []int, byKey map[int][]auditRow, r *verifyResult) check {
	var handoffs []time.Duration
	intervals, overlaps, open := 0, 0, 0
	var first string
	for _, k := range keys {
		var last *auditRow // the holder with the latest end so far
		for i := range byKey[k] {
			cur := &byKey[k][i]
			if cur.ended == nil {
				open++
			} else {
				intervals++
			}
			if last != nil && cur.started.Before(*last.ended) {
				overlaps++
				if first == "" {
					first = fmt.Sprintf("key %d: %s (fence %d) started %v before %s (fence %d) ended",
						k, cur.owner, cur.fence, roundDur(last.ended.Sub(cur.started)), last.owner, last.fence)
				}
			}
			if i > 0 {
				if prev := byKey[k][i-1]; prev.ended != nil && !cur.started.Before(*prev.ended) {
					handoffs = append(handoffs, cur.started.Sub(*prev.ended))
				}
			}
			if cur.ended != nil && (last == nil || cur.ended.After(*last.ended)) {
				last = cur
			}
		}
	}
	r.HandoffMs = percentiles(handoffs)
	c := check{Name: checkOverlap, Pass: overlaps == 0}
	if c.Pass {
		c.Detail = fmt.Sprintf("no two holders of a key overlapped (%d holds by the database clock)", intervals)
	} else {
		c.Detail = fmt.Sprintf("%d holders started while another holder of their key still held it; first: %s", overlaps, first)
	}
	if open > 0 {
		c.Detail += fmt.Sprintf("; %d holds have no recorded end (their end write failed) and bound no later start", open)
	}
	return c
}

// checkFenceOrder checks that each key's fences rose in the order its
// holders started.
func checkFenceOrder(keys []int, byKey map[int][]auditRow) check {
	bad := 0
	var first string
	for _, k := range keys {
		rows := byKey[k]
		for i := 1; i < len(rows); i++ {
			if rows[i].fence <= rows[i-1].fence {
				bad++
				if first == "" {
					first = fmt.Sprintf("key %d: fence %d (%s) was granted after fence %d (%s)", k, rows[i].fence, rows[i].owner, rows[i-1].fence, rows[i-1].owner)
				}
			}
		}
	}
	if bad > 0 {
		return check{Name: checkOrder, Detail: fmt.Sprintf("%d grants carried a fence no higher than the grant before them on their key; first: %s", bad, first)}
	}
	return check{Name: checkOrder, Pass: true, Detail: "each key's fences rose in grant order"}
}

// checkAckedWrites checks that every acknowledged audit write is in the
// record, and that each resource row carries its highest acknowledged fenced
// write (or a higher one whose answer was lost) and as many writes as were
// acknowledged (plus at most those whose answer was lost).
func checkAckedWrites(holds []holdRec, audit []auditRow, resource []resourceRow) check {
	rows := make(map[string]auditRow, len(audit))
	for _, a := range audit {
		rows[a.id] = a
	}
	type keyWrites struct {
		acked, unknown int64
		maxAcked       int64
		unknownFences  map[int64]bool
	}
	perKey := map[int]*keyWrites{}
	var problems []string
	missing, wrong, noEnd := 0, 0, 0
	for _, h := range holds {
		kw := perKey[h.Key]
		if kw == nil {
			kw = &keyWrites{unknownFences: map[int64]bool{}}
			perKey[h.Key] = kw
		}
		switch h.Write {
		case outOK:
			kw.acked++
			kw.maxAcked = max(kw.maxAcked, h.Fence)
		case outUnknown:
			kw.unknown++
			kw.unknownFences[h.Fence] = true
		}
		if h.Audit != outOK {
			continue
		}
		row, ok := rows[h.ID]
		switch {
		case !ok:
			if missing++; missing == 1 {
				problems = append(problems, fmt.Sprintf("audit row %s (key %d, fence %d) is missing", h.ID, h.Key, h.Fence))
			}
		case row.key != h.Key || row.fence != h.Fence:
			if wrong++; wrong == 1 {
				problems = append(problems, fmt.Sprintf("audit row %s says key %d, fence %d; its holder wrote key %d, fence %d", h.ID, row.key, row.fence, h.Key, h.Fence))
			}
		case h.End == outOK && row.ended == nil:
			if noEnd++; noEnd == 1 {
				problems = append(problems, fmt.Sprintf("audit row %s lacks its acknowledged end", h.ID))
			}
		}
	}
	var counts []string
	if missing+wrong+noEnd > 0 {
		counts = append(counts, fmt.Sprintf("%d acknowledged audit rows missing, %d changed, %d ends missing", missing, wrong, noEnd))
	}
	seen := map[int]bool{}
	for _, res := range resource {
		seen[res.key] = true
		kw := perKey[res.key]
		if kw == nil {
			kw = &keyWrites{unknownFences: map[int64]bool{}}
		}
		fenceOK := res.lastFence == kw.maxAcked || (res.lastFence > kw.maxAcked && kw.unknownFences[res.lastFence])
		countOK := res.writes >= kw.acked && res.writes <= kw.acked+kw.unknown
		if !fenceOK {
			problems = append(problems, fmt.Sprintf("key %d: the resource row's last_fence is %d, its highest acknowledged fenced write %d", res.key, res.lastFence, kw.maxAcked))
		}
		if !countOK {
			problems = append(problems, fmt.Sprintf("key %d: the resource row counts %d writes, %d were acknowledged (%d more unanswered)", res.key, res.writes, kw.acked, kw.unknown))
		}
	}
	for k := range perKey {
		if !seen[k] {
			problems = append(problems, fmt.Sprintf("key %d: the resource row is missing", k))
		}
	}
	if len(problems) == 0 {
		acked := 0
		for _, h := range holds {
			if h.Audit == outOK {
				acked++
			}
			if h.End == outOK {
				acked++
			}
		}
		return check{Name: checkAcked, Pass: true, Detail: fmt.Sprintf("all %d acknowledged audit writes are there; each key's last_fence is its highest acknowledged fenced write", acked)}
	}
	if len(problems) > 4 {
		problems = append(problems[:4], fmt.Sprintf("and %d more", len(problems)-4))
	}
	return check{Name: checkAcked, Detail: strings.Join(append(counts, problems...), "; ")}
}

// checkRefused fails when a holder's fenced write was refused: a newer
// fence had written to the key while that holder still held it.
func checkRefused(w writes) check {
	if w.Refused > 0 {
		return check{Name: checkFenced, Detail: fmt.Sprintf("%d fenced writes were refused: a newer fence had written to their key while their holder held it", w.Refused)}
	}
	return check{Name: checkFenced, Pass: true, Detail: fmt.Sprintf("none of %d was refused", w.Acknowledged+w.Unknown+w.Failed)}
}

// percentiles are the nearest-rank p50 and p99 and the maximum of ds, in
// milliseconds.
func percentiles(ds []time.Duration) latency {
	if len(ds) == 0 {
		return latency{}
	}
	slices.Sort(ds)
	at := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(ds)))) - 1
		return ms(ds[max(i, 0)])
	}
	return latency{P50: at(0.50), P99: at(0.99), Max: ms(ds[len(ds)-1]), Samples: len(ds)}
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

// fmtMs shows milliseconds: to a tenth below a second, else in seconds.
func fmtMs(v float64) string {
	if v < 1000 {
		return strconv.FormatFloat(v, 'f', 1, 64) + "ms"
	}
	return strconv.FormatFloat(v/1000, 'f', 2, 64) + "s"
}

// print writes the figures and the verdict (the header went out before the
// run).
func (r verifyResult) print(w io.Writer) {
	fmt.Fprintf(w, "grants         %d (%.1f/s)\n", r.Grants, r.GrantsPerSecond)
	fmt.Fprintf(w, "acquire        p50 %s  p99 %s  max %s\n", fmtMs(r.AcquireMs.P50), fmtMs(r.AcquireMs.P99), fmtMs(r.AcquireMs.Max))
	fmt.Fprintf(w, "hand-off       p50 %s  p99 %s  (a holder's end to the next grant's start on its key, database clock)\n",
		fmtMs(r.HandoffMs.P50), fmtMs(r.HandoffMs.P99))
	fmt.Fprintf(w, "audit writes   %s\n", r.AuditWrites.line(false))
	fmt.Fprintf(w, "fenced writes  %s\n", r.FencedWrites.line(true))
	fmt.Fprintf(w, "leases lost    %d\n", r.LostLeases)
	fmt.Fprintf(w, "errors         %d", r.Errors)
	if r.Errors > 0 {
		phases := make([]string, 0, len(r.ErrorsByPhase))
		for p, n := range r.ErrorsByPhase {
			phases = append(phases, fmt.Sprintf("%s %d", p, n))
		}
		slices.Sort(phases)
		fmt.Fprintf(w, " (%s)", strings.Join(phases, ", "))
	}
	fmt.Fprintln(w)
	for _, s := range r.ErrorSamples {
		fmt.Fprintf(w, "  %s\n", s)
	}
	for _, c := range r.Checks {
		v := "PASS"
		if !c.Pass {
			v = "FAIL"
		}
		fmt.Fprintf(w, "%s  %-13s  %s\n", v, c.Name, c.Detail)
	}
	fmt.Fprintf(w, "verdict: %s\n", r.Verdict)
}

func (w writes) line(fenced bool) string {
	s := fmt.Sprintf("%d acknowledged", w.Acknowledged)
	if fenced {
		s += fmt.Sprintf(", %d refused", w.Refused)
	}
	return s + fmt.Sprintf(", %d unanswered, %d failed", w.Unknown, w.Failed)
}
