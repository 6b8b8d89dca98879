package pglease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgfence/pgfence/fencedb"
	"github.com/pgfence/pgfence/internal/fencesql"
	"github.com/pgfence/pgfence/internal/pgerr"
)

// Group acquire. TryAcquire (and each attempt of Acquire) on one client that
// arrives while maxInFlight (2) acquisitions of that client are in flight waits
// for one of them to end, then goes out with every other waiting attempt in
// one AcquireBatch statement with one durable commit. Profiled at 8 clients
// (BENCHMARKS.md, Profiles), much of the server's cost of an acquisition is
// per statement and per transaction, not per row: executor start-up, the
// commit, the round trip. A batch pays it once.
//
// An attempt that finds fewer in flight runs its single Acquire on its own
// goroutine as before, so a lone caller waits for nothing more. Queued
// attempts go out from a runner goroutine, at most one per key in a batch
// (the others wait for the next: an upsert cannot touch a row twice, and
// the second would only be refused).

// acqReq is one queued attempt.
type acqReq struct {
	key   string
	ttl   time.Duration
	token string

	// Set by the runner before done is closed.
	done    chan struct{}
	sent    time.Time // before the batch was sent
	granted bool
	fence   int64
	expires time.Time
	err     error // the batch's error, if it failed as a whole
	// ambiguous: err left the outcome unknown (sent, no answer came).
	ambiguous bool
	batchN    int // how many attempts the batch carried

	// gaveUp: the caller's ctx ended before done; the runner gives back
	// what the batch granted it. Guarded by groupAcquirer.mu.
	gaveUp bool
	batch  *acqBatch
}

// acqBatch is one statement's worth of attempts.
type acqBatch struct {
	reqs   []*acqReq
	live   int // callers still waiting; guarded by groupAcquirer.mu
	cancel context.CancelFunc
}

type groupAcquirer struct {
	mu       sync.Mutex
	inFlight int // acquisitions of this client in flight (alone or batches)
	pending  []*acqReq
	batched  atomic.Int64 // attempts sent in batches of two or more (for tests)
}

// maxInFlight is how many acquisitions of one client may be in flight at
// once before further attempts queue for a batch. With one, the client's
// acquisitions wait behind one round trip and one WAL flush at a time, which
// halved throughput at 8 clients. With 4, 8 clients rarely have 4 in flight
// and send most acquisitions alone (server CPU per acquire + release: 272 to
// 315 µs, as without group acquire); with 2, batches form at 8 clients too
// (216 to 257 µs; 173 µs against 201 µs at 32 clients), with the higher
// throughput (bench/, -contenders pgfence, side by side; BENCHMARKS.md,
// Profiles).
const maxInFlight = 2

// errAlone tells a caller that its batch failed with a definite error: it
// runs its attempt alone, so that it gets its own key's answer (one key's
// lock timeout must not refuse the others).
var errAlone = errors.New("pglease: batch failed; try alone")

// acquire runs one attempt: alone while fewer than maxInFlight acquisitions
// of the client are in flight, else queued for the next batch.
func (c *Client) acquire(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	g := &c.group
	g.mu.Lock()
	if g.inFlight < maxInFlight {
		g.inFlight++
		g.mu.Unlock()
		l, err := c.tryAcquire(ctx, key, ttl)
		c.handOff()
		return l, err
	}
	r := &acqReq{key: key, ttl: ttl, token: newToken(), done: make(chan struct{})}
	g.pending = append(g.pending, r)
	g.mu.Unlock()
	select {
	case <-r.done:
		return c.answer(ctx, r)
	case <-ctx.Done():
	}
	g.mu.Lock()
	select {
	case <-r.done: // answered meanwhile: take the answer
		g.mu.Unlock()
		return c.answer(ctx, r)
	default:
	}
	r.gaveUp = true
	if b := r.batch; b == nil {
		// Not sent yet: drop it from the queue; nothing can be granted.
		g.pending = slices.DeleteFunc(g.pending, func(p *acqReq) bool { return p == r })
		g.mu.Unlock()
		return nil, c.gaveUp(ctx, key)
	} else if b.live--; b.live == 0 {
		b.cancel() // nobody waits for this statement any more
	}
	g.mu.Unlock()
	// The runner gives back what the batch grants it (see settle).
	return nil, c.gaveUp(ctx, key)
}

// gaveUp is the error of a caller whose ctx ended before its batch answered.
func (c *Client) gaveUp(ctx context.Context, key string) error {
	return fmt.Errorf("pglease: acquiring %q: %w", key, context.Cause(ctx))
}

// answer turns a batch's answer into the caller's result.
func (c *Client) answer(ctx context.Context, r *acqReq) (*Lease, error) {
	switch {
	case r.granted:
		return c.startLease(r.key, r.token, r.fence, r.expires, r.ttl, r.sent)
	case r.err == errAlone:
		return c.tryAcquire(ctx, r.key, r.ttl)
	case r.err != nil && !r.ambiguous:
		return nil, r.err
	case r.err != nil:
		return c.resolveAmbiguous(ctx, r.key, r.token, r.ttl, r.sent, r.err, r.batchN)
	default:
		return nil, notAcquired(r.key)
	}
}

// handOff ends an acquisition that ran alone: attempts that queued behind it
// go out from a runner goroutine.
func (c *Client) handOff() {
	g := &c.group
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.pending) == 0 {
		g.inFlight--
		return
	}
	if !c.track() {
		c.failPendingLocked(ErrClosed)
		return
	}
	go c.runBatches()
}

// failPendingLocked answers every queued attempt with err (definite: none
// was sent) and ends the in-flight state.
func (c *Client) failPendingLocked(err error) {
	g := &c.group
	for _, r := range g.pending {
		r.err = err
		close(r.done)
	}
	g.pending = nil
	g.inFlight--
}

// runBatches sends batches until the queue is empty.
func (c *Client) runBatches() {
	defer c.wg.Done()
	for {
		b, ctx := c.nextBatch()
		if b == nil {
			return
		}
		c.sendBatch(ctx, b)
		b.cancel()
	}
}

// nextBatch takes the queued attempts, at most one per key, in key order;
// nil when the queue is empty (and the client has nothing in flight).
func (c *Client) nextBatch() (*acqBatch, context.Context) {
	g := &c.group
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.pending) == 0 {
		g.inFlight--
		return nil, nil
	}
	seen := make(map[string]bool, len(g.pending))
	b := &acqBatch{}
	rest := g.pending[:0]
	for _, r := range g.pending {
		if seen[r.key] {
			rest = append(rest, r)
			continue
		}
		seen[r.key] = true
		r.batch = b
		b.reqs = append(b.reqs, r)
	}
	clear(g.pending[len(rest):])
	g.pending = rest
	b.live = len(b.reqs)
	slices.SortFunc(b.reqs, func(x, y *acqReq) int { return strings.Compare(x.key, y.key) })
	// A batch outlives any one caller (a caller's ctx ending must not
	// cancel the others' statement); it is cancelled when every caller of
	// the batch gave up.
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	return b, ctx
}

// sendBatch runs one batch and answers its callers.
func (c *Client) sendBatch(ctx context.Context, b *acqBatch) {
	n := len(b.reqs)
	p := fencesql.AcquireBatchParams{Owner: c.cfg.owner,
		LockKeys: make([]string, n), OwnerTokens: make([]string, n), TtlsMicros: make([]int64, n)}
	for i, r := range b.reqs {
		p.LockKeys[i], p.OwnerTokens[i], p.TtlsMicros[i] = r.key, r.token, r.ttl.Microseconds()
	}
	sent := time.Now()
	var rows []fencesql.AcquireBatchRow
	var err error
	if n == 1 {
		// Alone after all: the plain statement, cheaper to plan.
		var row fencedb.AcquireRow
		row, err = c.queries(ctx).Acquire(ctx, fencedb.AcquireParams{
			LockKey: p.LockKeys[0], Owner: c.cfg.owner, OwnerToken: p.OwnerTokens[0], TtlMicros: p.TtlsMicros[0]})
		if err == nil {
			rows = []fencesql.AcquireBatchRow{{OwnerToken: p.OwnerTokens[0], Fence: row.Fence, ExpiresAt: row.ExpiresAt}}
		} else if isNoRows(err) || pgerr.IsLockNotAvailable(err) {
			err = nil // refused, as tryAcquire counts a lock timeout
		}
	} else {
		c.group.batched.Add(int64(n))
		rows, err = c.own(ctx).AcquireBatch(ctx, p)
	}
	granted := make(map[string]fencesql.AcquireBatchRow, len(rows))
	for _, row := range rows {
		granted[row.OwnerToken] = row
	}
	ambiguous := err != nil && mayHaveExecuted(err)
	if err != nil && !ambiguous {
		err = errAlone // the transaction rolled back: nothing was granted
	}
	g := &c.group
	g.mu.Lock()
	var giveBack []*acqReq
	for _, r := range b.reqs {
		r.sent, r.err, r.ambiguous, r.batchN = sent, err, ambiguous, n
		if row, ok := granted[r.token]; ok && err == nil {
			r.granted, r.fence, r.expires = true, row.Fence, row.ExpiresAt
		}
		if r.gaveUp && (r.granted || ambiguous) {
			giveBack = append(giveBack, r)
		}
		close(r.done)
	}
	g.mu.Unlock()
	for _, r := range giveBack {
		c.settle(r, ambiguous)
	}
}

// settle gives back an attempt whose caller gave up while its batch was in
// flight: a grant is released (and its token tombstoned); an ambiguous
// outcome is abandoned as tryAcquire abandons its own.
func (c *Client) settle(r *acqReq, ambiguous bool) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.resolveWait)
	defer cancel()
	if _, err := c.abandon(ctx, r.key, r.token); err != nil {
		c.cfg.logger.Warn("pglease: could not give back an acquisition whose caller gave up; it expires at its TTL", "key", r.key, "err", err)
	}
	if ambiguous {
		c.recheckLater(r.key, r.token, r.batchN)
	}
}
