package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// queuedBehind starts the waiters one at a time, each once the one before
// it has taken its place in key's queue (a row of pgfence_waiters), so that
// the order they started in is the order they queued in, however slowly
// each process starts. It returns once all are queued; wg waits for them.
func queuedBehind(t *testing.T, wg *sync.WaitGroup, key string, waiters []func()) {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	for i, w := range waiters {
		wg.Go(w)
		waitFor(t, fmt.Sprintf("waiter %d to queue", i+1), func() bool {
			var n int
			err := pool.QueryRow(ctx, `SELECT count(*) FROM pgfence_waiters WHERE lock_key = $1`, key).Scan(&n)
			return err == nil && n >= i+1
		})
	}
}

// intervals reads a log of "in|out NANOS ..." lines and returns the most
// runs inside at once and how many runs started.
func intervals(t *testing.T, log string) (peak, runs int) {
	t.Helper()
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	type ev struct {
		at int64
		d  int
	}
	var evs []ev
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(l)
		at, _ := strconv.ParseInt(f[1], 10, 64)
		d := -1
		if f[0] == "in" {
			d = 1
			runs++
		}
		evs = append(evs, ev{at, d})
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].at < evs[j].at || evs[i].at == evs[j].at && evs[i].d < evs[j].d })
	n := 0
	for _, e := range evs {
		n += e.d
		peak = max(peak, n)
	}
	return peak, runs
}

// Eight exec --permits 3 --wait on one key, each holding about a second:
// all run, never more than 3 at once, and 3 at the peak; each sees a slot.
func TestExecPermits(t *testing.T) {
	t.Parallel()
	key := randomName("sem:")
	log := filepath.Join(t.TempDir(), "log")
	script := `echo "in $(date +%s%N) $PGFENCE_SLOT" >> "$LOG"; sleep 1; echo "out $(date +%s%N)" >> "$LOG"`
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			r := pgfence(t, []string{"LOG=" + log}, "exec", "--database-url", pgtest.URL(),
				"--key", key, "--permits", "3", "--wait", "30s", "--", "sh", "-c", script)
			if r.code != 0 {
				t.Errorf("exit %s", r)
			}
		})
	}
	wg.Wait()
	peak, runs := intervals(t, log)
	if runs != 8 || peak != 3 {
		t.Fatalf("%d runs, at most %d at once; want 8 and 3", runs, peak)
	}
}

// Three --shared holders at once; an --exclusive exec with --wait starts
// only after the last of them ended.
func TestExecSharedThenExclusive(t *testing.T) {
	t.Parallel()
	key := randomName("rw:")
	log := filepath.Join(t.TempDir(), "log")
	env := []string{"LOG=" + log}
	var wg sync.WaitGroup
	for _, d := range []string{"1", "1.5", "2"} {
		wg.Go(func() {
			r := pgfence(t, env, "exec", "--database-url", pgtest.URL(), "--key", key, "--shared", "--",
				"sh", "-c", `echo "in $(date +%s%N)" >> "$LOG"; sleep `+d+`; echo "out $(date +%s%N)" >> "$LOG"`)
			if r.code != 0 {
				t.Errorf("shared: %s", r)
			}
		})
	}
	time.Sleep(500 * time.Millisecond)
	r := pgfence(t, env, "exec", "--database-url", pgtest.URL(), "--key", key, "--exclusive", "--wait", "20s", "--",
		"sh", "-c", `echo "in $(date +%s%N)" >> "$LOG"; echo "out $(date +%s%N)" >> "$LOG"`)
	wantCode(t, r, 0)
	wg.Wait()
	data, _ := os.ReadFile(log)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 8 || !strings.HasPrefix(lines[6], "in ") {
		t.Fatalf("the exclusive run did not come after every shared run ended:\n%s", data)
	}
	if peak, _ := intervals(t, log); peak != 3 {
		t.Fatalf("shared holders at once: %d, want 3:\n%s", peak, data)
	}
}

// --key a --key b held: --key b alone exits 81; --key c --key a exits 81
// and leaves c free.
func TestExecKeySet(t *testing.T) {
	t.Parallel()
	p := randomName("set:")
	a, b, c := p+"a", p+"b", p+"c"
	started := filepath.Join(t.TempDir(), "started")
	holder, _ := startExec(t, []string{"STARTED=" + started}, "exec", "--database-url", pgtest.URL(), "--key", a, "--key", b, "--",
		"sh", "-c", `touch "$STARTED"; sleep 5`)
	waitFor(t, "the set to be held", func() bool { _, err := os.Stat(started); return err == nil })
	wantCode(t, pgfence(t, nil, "exec", "--database-url", pgtest.URL(), "--key", b, "--", "true"), exitHeld)
	r := pgfence(t, nil, "exec", "--database-url", pgtest.URL(), "--key", c, "--key", a, "--", "true")
	wantCode(t, r, exitHeld)
	if !strings.Contains(r.stderr, "'"+a+"'") {
		t.Fatalf("the refusal does not name %s: %s", a, r)
	}
	wantCode(t, pgfence(t, nil, "exec", "--database-url", pgtest.URL(), "--key", c, "--", "true"), 0)
	if code := waitExit(t, holder); code != 0 {
		t.Fatalf("set holder exit %d", code)
	}
	r = pgfence(t, nil, "exec", "--database-url", pgtest.URL(), "--key", a, "--key", b, "--", "sh", "-c", `printf %s "$PGFENCE_FENCES"`)
	wantCode(t, r, 0)
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 2 || !strings.HasSuffix(lines[0], " "+a) || !strings.HasSuffix(lines[1], " "+b) {
		t.Fatalf("PGFENCE_FENCES = %q", r.stdout)
	}
	wantCode(t, pgfence(t, nil, "exec", "--database-url", pgtest.URL(), "--key", a, "--key", a, "--", "true"), exitUsage)
	wantCode(t, pgfence(t, nil, "exec", "--database-url", pgtest.URL(), "--key", a, "--key", b, "--permits", "2", "--", "true"), exitUsage)
}

// exec --hold-at-least 4s -- true, then exec on the same key at once: 81;
// 4.5 s after the first, it runs.
func TestExecHoldAtLeast(t *testing.T) {
	t.Parallel()
	key := randomName("hold:")
	start := time.Now()
	wantCode(t, pgfence(t, nil, "exec", "--database-url", pgtest.URL(), "--key", key, "--hold-at-least", "4s", "--", "true"), 0)
	wantCode(t, pgfence(t, nil, "exec", "--database-url", pgtest.URL(), "--key", key, "--", "true"), exitHeld)
	time.Sleep(time.Until(start.Add(4500 * time.Millisecond)))
	wantCode(t, pgfence(t, nil, "exec", "--database-url", pgtest.URL(), "--key", key, "--", "true"), 0)
}

// A holder keeps a key while five exec --wait queue one after another:
// they run in the order they queued, 1 2 3 4 5.
func TestExecWaitIsFIFO(t *testing.T) {
	t.Parallel()
	key := randomName("fifo:")
	log := filepath.Join(t.TempDir(), "log")
	started := filepath.Join(t.TempDir(), "started")
	holder, _ := startExec(t, []string{"STARTED=" + started}, "exec", "--database-url", pgtest.URL(), "--key", key, "--",
		"sh", "-c", `touch "$STARTED"; while [ ! -e "$STARTED.go" ]; do sleep 0.05; done`)
	waitFor(t, "the holder", func() bool { _, err := os.Stat(started); return err == nil })
	var wg sync.WaitGroup
	var waiters []func()
	for i := 1; i <= 5; i++ {
		waiters = append(waiters, func() {
			r := pgfence(t, []string{"LOG=" + log}, "exec", "--database-url", pgtest.URL(), "--key", key, "--wait", "60s", "--",
				"sh", "-c", `echo `+strconv.Itoa(i)+` >> "$LOG"`)
			if r.code != 0 {
				t.Errorf("waiter %d: %s", i, r)
			}
		})
	}
	queuedBehind(t, &wg, key, waiters)
	if err := os.WriteFile(started+".go", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	waitExit(t, holder)
	data, _ := os.ReadFile(log)
	if got := strings.Fields(string(data)); strings.Join(got, " ") != "1 2 3 4 5" {
		t.Fatalf("ran in the order %v, want 1 2 3 4 5", got)
	}
}

// A semaphore of 2 permits, both held, while five exec --permits 2 --wait
// queue one after another; then one permit is freed and the other kept:
// they run one after another on the freed permit, in the order they
// queued, 1 2 3 4 5.
func TestExecPermitsWaitIsFIFO(t *testing.T) {
	t.Parallel()
	key := randomName("fifo-sem:")
	log := filepath.Join(t.TempDir(), "log")
	started := filepath.Join(t.TempDir(), "started")
	env := []string{"STARTED=" + started}
	long, _ := startExec(t, env, "exec", "--database-url", pgtest.URL(), "--key", key, "--permits", "2", "--",
		"sh", "-c", `touch "$STARTED.long"; while [ ! -e "$STARTED.long.go" ]; do sleep 0.05; done`)
	holder, _ := startExec(t, env, "exec", "--database-url", pgtest.URL(), "--key", key, "--permits", "2", "--",
		"sh", "-c", `touch "$STARTED"; while [ ! -e "$STARTED.go" ]; do sleep 0.05; done`)
	waitFor(t, "the holders", func() bool {
		_, err := os.Stat(started)
		_, err2 := os.Stat(started + ".long")
		return err == nil && err2 == nil
	})
	var wg sync.WaitGroup
	var waiters []func()
	for i := 1; i <= 5; i++ {
		waiters = append(waiters, func() {
			r := pgfence(t, []string{"LOG=" + log}, "exec", "--database-url", pgtest.URL(), "--key", key, "--permits", "2", "--wait", "60s", "--",
				"sh", "-c", `echo `+strconv.Itoa(i)+` >> "$LOG"; sleep 0.2`)
			if r.code != 0 {
				t.Errorf("waiter %d: %s", i, r)
			}
		})
	}
	queuedBehind(t, &wg, key, waiters)
	if err := os.WriteFile(started+".go", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := os.WriteFile(started+".long.go", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitExit(t, holder)
	waitExit(t, long)
	data, _ := os.ReadFile(log)
	if got := strings.Fields(string(data)); strings.Join(got, " ") != "1 2 3 4 5" {
		t.Fatalf("ran in the order %v, want 1 2 3 4 5", got)
	}
}

// An --exclusive holder while exec --wait queue one after another as
// shared 1, shared 2, exclusive 3, shared 4: 1 and 2 run together, 3 after
// both ended, 4 (though shared) only after 3.
func TestExecSharedExclusiveWaitIsFIFO(t *testing.T) {
	t.Parallel()
	key := randomName("fifo-rw:")
	log := filepath.Join(t.TempDir(), "log")
	started := filepath.Join(t.TempDir(), "started")
	holder, _ := startExec(t, []string{"STARTED=" + started}, "exec", "--database-url", pgtest.URL(), "--key", key, "--exclusive", "--",
		"sh", "-c", `touch "$STARTED"; while [ ! -e "$STARTED.go" ]; do sleep 0.05; done`)
	waitFor(t, "the holder", func() bool { _, err := os.Stat(started); return err == nil })
	var wg sync.WaitGroup
	var waiters []func()
	for i, kind := range []string{"--shared", "--shared", "--exclusive", "--shared"} {
		waiters = append(waiters, func() {
			n := strconv.Itoa(i + 1)
			r := pgfence(t, []string{"LOG=" + log}, "exec", "--database-url", pgtest.URL(), "--key", key, kind, "--wait", "60s", "--",
				"sh", "-c", `echo +`+n+` >> "$LOG"; sleep 0.5; echo -`+n+` >> "$LOG"`)
			if r.code != 0 {
				t.Errorf("waiter %s: %s", n, r)
			}
		})
	}
	queuedBehind(t, &wg, key, waiters)
	if err := os.WriteFile(started+".go", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	waitExit(t, holder)
	data, _ := os.ReadFile(log)
	got := strings.Join(strings.Fields(string(data)), " ")
	for _, want := range []string{"+1 +2 -1 -2 +3 -3 +4 -4", "+1 +2 -2 -1 +3 -3 +4 -4", "+2 +1 -1 -2 +3 -3 +4 -4", "+2 +1 -2 -1 +3 -3 +4 -4"} {
		if got == want {
			return
		}
	}
	t.Fatalf("ran as %s, want 1 and 2 together, then 3, then 4", got)
}

// pgfence list shows the permits held per semaphore key, the shared
// holders, and the fair waiters of a mutex key in queue order; show KEY
// the same for one key.
func TestListShowsKinds(t *testing.T) {
	t.Parallel()
	p := randomName("kinds:")
	db := pgtest.URL()
	// The holders hold until the test has read everything: gate opens them.
	gate := []string{"GATE=" + filepath.Join(t.TempDir(), "gate")}
	hold := []string{"--", "sh", "-c", `while [ ! -e "$GATE" ]; do sleep 0.05; done`}
	t.Cleanup(func() { os.WriteFile(strings.TrimPrefix(gate[0], "GATE="), nil, 0o644) })
	startExec(t, gate, append([]string{"exec", "--database-url", db, "--key", p + "dev", "--permits", "2"}, hold...)...)
	startExec(t, gate, append([]string{"exec", "--database-url", db, "--key", p + "rw", "--shared"}, hold...)...)
	startExec(t, gate, append([]string{"exec", "--database-url", db, "--key", p + "m"}, hold...)...)
	waitFor(t, "the holders", func() bool {
		r := pgfence(t, nil, "list", "--database-url", db)
		return strings.Contains(r.stdout, p+"dev") && strings.Contains(r.stdout, p+"rw") && strings.Contains(r.stdout, p+"m ")
	})
	startExec(t, nil, "exec", "--database-url", db, "--key", p+"m", "--wait", "60s", "--owner", "first", "--", "true")
	pool := pgtest.Pool(t)
	waitFor(t, "the first waiter to queue", func() bool {
		var n int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pgfence_waiters WHERE lock_key = $1`, p+"m").Scan(&n)
		return err == nil && n == 1
	})
	startExec(t, nil, "exec", "--database-url", db, "--key", p+"m", "--wait", "60s", "--owner", "second", "--", "true")
	startExec(t, nil, "exec", "--database-url", db, "--key", p+"rw", "--exclusive", "--wait", "60s", "--owner", "writer", "--", "true")
	var out string
	waitFor(t, "the waiters listed", func() bool {
		out = pgfence(t, nil, "list", "--database-url", db).stdout
		return strings.Contains(out, "second") && strings.Contains(out, "writer")
	})
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	for _, want := range []string{p + "dev permit of 2 0 ", p + "rw shared 0 ", p + "m first 0 exclusive ", p + "m second 1 exclusive ", p + "rw writer 0 exclusive "} {
		found := false
		for _, l := range lines {
			found = found || strings.HasPrefix(l, want)
		}
		if !found {
			t.Errorf("list lacks a line %q:\n%s", want, out)
		}
	}
	if r := pgfence(t, nil, "show", "--database-url", db, p+"dev"); r.code != 0 || !strings.Contains(r.stdout, "permit of 2") {
		t.Errorf("show of a semaphore key: %s", r)
	}

	// list --json has the same, one entry each.
	r := pgfence(t, nil, "list", "--json", "--database-url", db)
	var entries []leaseJSON
	if err := json.Unmarshal([]byte(r.stdout), &entries); err != nil {
		t.Fatalf("list --json: %v\n%s", err, r.stdout)
	}
	got := map[string]bool{}
	for _, e := range entries {
		if !strings.HasPrefix(e.Key, p) {
			continue
		}
		desc := fmt.Sprintf("%s %s held=%v waiting=%v", strings.TrimPrefix(e.Key, p), e.Kind, e.Held, e.Waiting)
		if e.Permits != nil {
			desc += fmt.Sprintf(" permits=%d", *e.Permits)
		}
		if e.Slot != nil {
			desc += fmt.Sprintf(" slot=%d", *e.Slot)
		}
		if e.Position != nil {
			desc += fmt.Sprintf(" position=%d owner=%s", *e.Position, e.Owner)
		}
		got[desc] = true
	}
	for _, want := range []string{"dev permit held=true waiting=false permits=2 slot=0", "rw shared held=true waiting=false slot=0",
		"m lease held=true waiting=false", "m exclusive held=false waiting=true position=0 owner=first",
		"m exclusive held=false waiting=true position=1 owner=second", "rw exclusive held=false waiting=true position=0 owner=writer"} {
		if !got[want] {
			t.Errorf("list --json lacks %q; has %v", want, got)
		}
	}
}
