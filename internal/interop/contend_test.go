package interop

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

var contendKeys = []string{"invoice:inv_72", "invoice:inv_73"}

// Go clients (two pglease clients, eight goroutines), two psql sessions and
// two Python processes take, write under and release leases on the same
// two keys at once. On the database's record of every lease row version:
// every kind of client was granted leases, fences rise strictly with every
// grant of a key whoever took it, and no grant began before the previous
// holder's lease had ended (never two unexpired holders).
func TestGoPsqlPythonContend(t *testing.T) {
	py := python(t)
	url, pool := database(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, k := range contendKeys {
		if _, err := pool.Exec(ctx, `INSERT INTO resource (key) VALUES ($1)`, k); err != nil {
			t.Fatal(err)
		}
	}
	psqlPath := pgtest.Tool(t, "psql")
	const run = 4 * time.Second
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := exec.CommandContext(ctx, py, filepath.Join("testdata", "holder.py"), url, "contend",
				strings.Join(contendKeys, ","), fmt.Sprint(run.Seconds())).CombinedOutput()
			if err != nil {
				errs <- fmt.Errorf("python: %v\n%s", err, out)
			}
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- psqlContend(ctx, psqlPath, url, 60)
		}()
	}
	for range 2 {
		c, err := pglease.New(pool, pglease.WithOwner("go"), pglease.WithoutAutoRenew())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- goContend(ctx, c, pool, run)
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	checkHistory(t, pool, map[string]bool{"go": true, "psql": true, "python": true})
}

// goContend takes, writes under and releases leases until run passes.
func goContend(ctx context.Context, c *pglease.Client, pool *pgxpool.Pool, run time.Duration) error {
	end := time.Now().Add(run)
	for time.Now().Before(end) {
		key := contendKeys[rand.IntN(len(contendKeys))]
		l, err := c.TryAcquire(ctx, key, 2*time.Second)
		if errors.Is(err, pgfence.ErrNotAcquired) {
			time.Sleep(time.Duration(rand.IntN(10)) * time.Millisecond)
			continue
		}
		if err != nil {
			return fmt.Errorf("go acquire: %w", err)
		}
		if _, err := pool.Exec(ctx, guardedWrite, l.Fence(), "go", key); err != nil {
			return fmt.Errorf("go guarded write: %w", err)
		}
		if err := l.Release(ctx); err != nil {
			return fmt.Errorf("go release: %w", err)
		}
	}
	return nil
}

// psqlContend runs one psql session that tries rounds times to take a
// lease on a random key, writes under it and releases it.
func psqlContend(ctx context.Context, psqlPath, url string, rounds int) error {
	var script strings.Builder
	for range rounds {
		key := contendKeys[rand.IntN(len(contendKeys))]
		fmt.Fprintf(&script, `SELECT coalesce((SELECT fence FROM pgfence_acquire('%[1]s', '2 s', 'psql')), 0) AS f \gset
SELECT :f > 0 AS got \gset
\if :got
UPDATE resource SET last_fence = :f, writes = writes + 1, last_writer = 'psql' WHERE key = '%[1]s' AND last_fence <= :f;
SELECT released FROM pgfence_release('%[1]s', :f);
\endif
`, key)
	}
	cmd := exec.CommandContext(ctx, psqlPath, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", url)
	cmd.Stdin = strings.NewReader(script.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("psql: %v\n%s", err, out)
	}
	return nil
}

// checkHistory fails the test on every violation historyViolations finds,
// and when a kind of client (owner) in want was granted no lease.
func checkHistory(t *testing.T, pool *pgxpool.Pool, want map[string]bool) {
	t.Helper()
	violations, granted := historyViolations(t, pool)
	for _, v := range violations {
		t.Error(v)
	}
	for owner := range want {
		if granted[owner] == 0 {
			t.Errorf("no grant to %s clients: the contention did not involve them (grants: %v)", owner, granted)
		}
	}
	t.Logf("grants by kind of client: %v", granted)
}

// historyViolations reads the record of every lease row version: per key,
// fences must rise strictly from grant to grant, and each grant must begin
// no earlier than the previous grant's last recorded expiry. It returns
// what broke that, and the number of grants per owner.
func historyViolations(t *testing.T, pool *pgxpool.Pool) (violations []string, granted map[string]int) {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT lock_key, fence, owner, acquired_at, expires_at FROM lease_history ORDER BY lock_key, id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type grant struct {
		fence      int64
		owner      string
		start, end time.Time // end: the expiry its last row version recorded
	}
	byKey := map[string][]*grant{}
	for rows.Next() {
		var key, owner string
		var fence int64
		var start, end time.Time
		if err := rows.Scan(&key, &fence, &owner, &start, &end); err != nil {
			t.Fatal(err)
		}
		gs := byKey[key]
		if n := len(gs); n > 0 && gs[n-1].fence == fence {
			gs[n-1].end = end // a renewal or the release of the same grant
			continue
		}
		byKey[key] = append(gs, &grant{fence: fence, owner: owner, start: start, end: end})
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	granted = map[string]int{}
	for key, gs := range byKey {
		for i, g := range gs {
			granted[g.owner]++
			if i == 0 {
				continue
			}
			prev := gs[i-1]
			if g.fence <= prev.fence {
				violations = append(violations, fmt.Sprintf("%s: fence %d (%s) granted after fence %d (%s): fences must rise",
					key, g.fence, g.owner, prev.fence, prev.owner))
			}
			if g.start.Before(prev.end) {
				violations = append(violations, fmt.Sprintf("%s: %s's grant (fence %d) at %v began before %s's lease (fence %d) ended at %v: two unexpired holders",
					key, g.owner, g.fence, g.start, prev.owner, prev.fence, prev.end))
			}
		}
	}
	return violations, granted
}

// The history check bites: a rogue psql grant that takes a key from an
// unexpired Go holder (a plain UPDATE, not pgfence_acquire) is reported.
func TestHistoryCheckCatchesOverlap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := database(t)
	c := goClient(t, pool)
	l, err := c.TryAcquire(ctx, "overlap", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	psql(t, url, `UPDATE lock_leases SET owner = 'psql', fence = pgfence_next_fence(), acquired_at = now(), expires_at = now() + interval '1 min' WHERE lock_key = 'overlap';`)
	violations, _ := historyViolations(t, pool)
	if len(violations) != 1 || !strings.Contains(violations[0], "two unexpired holders") {
		t.Fatalf("the rogue overlapping grant was not reported: %v", violations)
	}
	l.Release(ctx)
}

// A Python holder frozen (SIGSTOP) past its TTL: a Go client takes the key
// with a higher fence and writes; when the Python process resumes, its
// guarded write under the old fence is refused, and the row keeps the Go
// holder's write.
func TestFrozenPythonHolderRefused(t *testing.T) {
	py := python(t)
	url, pool := database(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const key = "invoice:inv_72"
	if _, err := pool.Exec(ctx, `INSERT INTO resource (key) VALUES ($1)`, key); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, py, filepath.Join("testdata", "holder.py"), url, "frozen", key, "1 s")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	out := bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	var pyFence int64
	if _, serr := fmt.Sscanf(line, "fence %d", &pyFence); err != nil || serr != nil {
		t.Fatalf("python holder: %q %v %v\n%s", line, err, serr, stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	c := goClient(t, pool)
	if _, err := c.TryAcquire(ctx, key, time.Minute); !errors.Is(err, pgfence.ErrNotAcquired) {
		t.Fatalf("Go acquire while the frozen Python lease is unexpired: %v, want ErrNotAcquired", err)
	}
	var l *pglease.Lease
	for l == nil { // until the frozen holder's TTL has run out by the database clock
		l, err = c.TryAcquire(ctx, key, time.Minute)
		if err != nil && !errors.Is(err, pgfence.ErrNotAcquired) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if l.Fence() <= pyFence {
		t.Fatalf("Go's fence %d is not above the frozen Python holder's %d", l.Fence(), pyFence)
	}
	if tag, err := pool.Exec(ctx, guardedWrite, l.Fence(), "go", key); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("Go's guarded write: %v %v", tag, err)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(out)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("python holder: %v\n%s", err, stderr.String())
	}
	if got := strings.TrimSpace(string(rest)); got != "refused" {
		t.Fatalf("the resumed Python holder's write under fence %d: %q, want refused", pyFence, got)
	}
	var writer string
	var fence int64
	if err := pool.QueryRow(ctx, `SELECT last_writer, last_fence FROM resource WHERE key = $1`, key).Scan(&writer, &fence); err != nil {
		t.Fatal(err)
	}
	if writer != "go" || fence != l.Fence() {
		t.Fatalf("the row holds %s's write under fence %d, want go's under %d", writer, fence, l.Fence())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
