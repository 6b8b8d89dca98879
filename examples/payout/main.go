package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/pgfence/pgfence/examples/story"
	"github.com/pgfence/pgfence/payouts"
	"github.com/pgfence/pgfence/pgguard"
	"github.com/pgfence/pgfence/pglease"
)

const (
	ttl           = 500 * time.Millisecond  // the workers' lease
	clientTimeout = 400 * time.Millisecond  // the workers' HTTP timeout
	slowAnswer    = 1000 * time.Millisecond // how late the provider answers a slow call
)

func main() {
	story.Main("payout (stable idempotency key, durable intent, reconciliation: exactly one payout)", run)
}

func run(ctx context.Context, env *story.Env, v *story.Verdict) error {
	prov, err := startProvider(env)
	if err != nil {
		return err
	}
	defer prov.close()
	env.Note("fake payment provider listening on %s (honours Idempotency-Key)", prov.url)

	intents, err := payouts.New(ctx, env.Pool)
	if err != nil {
		return err
	}
	newWorker := func(name string) (*worker, error) {
		leases, err := pglease.New(env.Pool, pglease.WithOwner(name), pglease.WithoutAutoRenew(),
			pglease.WithBackoff(10*time.Millisecond, 50*time.Millisecond), pglease.WithMaxWait(10*time.Second))
		if err != nil {
			return nil, err
		}
		return &worker{name: name, env: env, leases: leases, intents: intents, prov: prov,
			http: &http.Client{Timeout: clientTimeout}}, nil
	}
	w1, err := newWorker("worker-1")
	if err != nil {
		return err
	}
	defer w1.leases.Close()
	w2, err := newWorker("worker-2")
	if err != nil {
		return err
	}
	defer w2.leases.Close()
	rec, err := newWorker("reconciler")
	if err != nil {
		return err
	}
	defer rec.leases.Close()

	// 0. The failure mode, with the lock and nothing else.
	env.Section("0. the lock alone: no idempotency key, a timeout, a legitimate retry")
	prov.slowFirst("po_2001")
	for _, w := range []*worker{w1, w2} {
		l, err := w.leases.Acquire(ctx, "payout:po_2001", ttl)
		if err != nil {
			return err
		}
		env.Logf(w.name, "holds the lease on payout:po_2001 (fence %d); POST /payouts without an idempotency key", l.Fence())
		_, err = w.post(ctx, "", "po_2001", 9900)
		env.Logf(w.name, "provider call: %s", describe(err))
		// No release: worker-1 gave up on the timeout and its lease ran out.
	}
	naive := prov.paid("po_2001")
	env.Note("EXPECTED, the failure a lock alone allows: both workers held the lock, at different times, and the provider paid %d times", naive)
	v.Check(naive == 2, "without an idempotency key the lock alone let the retry pay twice (%d payouts)", naive)

	// 1. Timeout, then a retry with the same key.
	env.Section("1. durable intent + stable key: worker-1 times out, worker-2 retries")
	p, err := intents.Create(ctx, env.Pool, "po_1001", 25000, "EUR")
	if err != nil {
		return err
	}
	env.Logf("api", "records the intent po_1001 (250.00 EUR): %s, idempotency key %s", p.State, p.IdempotencyKey)
	prov.slowFirst("po_1001")
	l1, err := w1.submit(ctx, "po_1001")
	if err == nil {
		return errors.New("worker-1's call should have timed out")
	}
	env.Logf("worker-1", "does not know whether it was paid: it must not guess (no MarkFailed); it stalls, and its lease expires")
	if _, err := w2.submit(ctx, "po_1001"); err != nil {
		return fmt.Errorf("worker-2's retry: %w", err)
	}
	env.Logf("worker-1", "wakes up and records its timeout as a failure, with its old fence %d", l1.Fence())
	_, staleErr := intents.MarkFailed(ctx, env.Pool, "po_1001", l1.Fence(), "provider timeout")
	env.Logf("worker-1", "MarkFailed: %s", describe(staleErr))

	// 2. A crash after the provider paid: reconciliation.
	env.Section("2. worker-1 crashes after the provider paid po_1002; reconciliation asks the provider")
	if _, err := intents.Create(ctx, env.Pool, "po_1002", 4200, "EUR"); err != nil {
		return err
	}
	prov.slowFirst("po_1002")
	if _, err := w1.submit(ctx, "po_1002"); err == nil {
		return errors.New("worker-1's call should have timed out")
	}
	env.Logf("worker-1", "crashes: po_1002 stays SUBMITTING")
	reconciled, err := rec.reconcile(ctx)
	if err != nil {
		return err
	}

	// Read back: the provider's ledger and the intents.
	env.Section("read back: the provider's ledger and the intent rows")
	ok := true
	for _, id := range []string{"po_1001", "po_1002"} {
		p, err := intents.Get(ctx, env.Pool, id)
		if err != nil {
			return err
		}
		paid, ref := prov.paid(id), prov.ref(id)
		env.Note("%s: provider paid %d time(s), ref %s; intent %s, ref %s, %d attempt(s)", id, paid, ref, p.State, p.ProviderRef, p.Attempts)
		ok = ok && paid == 1 && p.State == payouts.Submitted && p.ProviderRef == ref
	}
	env.Note("provider requests: %d, replays answered from the idempotency store: %d", prov.requests(), prov.replays())
	v.Check(ok, "po_1001 and po_1002 were each paid exactly once, and their intents say SUBMITTED with the provider's reference")
	v.Check(prov.replays() >= 1, "worker-2's retry carried the same key and got the original result back (%d replay)", prov.replays())
	v.Check(errors.Is(staleErr, pgguard.ErrStaleFence), "worker-1's late MarkFailed with its old fence was refused as stale")
	v.Check(reconciled == 1, "reconciliation found po_1002 at the provider by its key and recorded it (%d)", reconciled)
	return nil
}

type worker struct {
	name    string
	env     *story.Env
	leases  *pglease.Client
	intents *payouts.Intents
	prov    *provider
	http    *http.Client
}

// submit is the worker's path: lease, SUBMITTING under the fence, the call
// with the stable key, then SUBMITTED under the fence. On a timeout it
// returns the error and leaves the intent in SUBMITTING: the outcome is
// unknown. The lease is not released (the worker stalled or crashed).
func (w *worker) submit(ctx context.Context, id string) (*pglease.Lease, error) {
	l, err := w.leases.Acquire(ctx, "payout:"+id, ttl)
	if err != nil {
		return nil, err
	}
	p, err := w.intents.BeginSubmit(ctx, w.env.Pool, id, l.Fence())
	if err != nil {
		return l, err
	}
	w.env.Logf(w.name, "lease payout:%s (fence %d); intent -> %s (attempt %d); POST with Idempotency-Key %s",
		id, l.Fence(), p.State, p.Attempts, p.IdempotencyKey)
	ref, err := w.post(ctx, p.IdempotencyKey, id, p.AmountCents)
	w.env.Logf(w.name, "provider call: %s", describe(err))
	if err != nil {
		return l, err
	}
	p, err = w.intents.MarkSubmitted(ctx, w.env.Pool, id, l.Fence(), ref)
	if err != nil {
		return l, err
	}
	w.env.Logf(w.name, "intent -> %s, provider ref %s", p.State, p.ProviderRef)
	return l, nil
}

// reconcile takes the payouts stuck in SUBMITTING and asks the provider
// about each by its idempotency key; it returns how many it settled.
func (w *worker) reconcile(ctx context.Context) (int, error) {
	var stuck []payouts.Payout
	err := story.WaitFor(ctx, func() bool {
		var err error
		stuck, err = w.intents.Stuck(ctx, w.env.Pool, 2*clientTimeout, 100)
		return err == nil && len(stuck) > 0
	})
	if err != nil {
		return 0, err
	}
	settled := 0
	for _, p := range stuck {
		w.env.Logf(w.name, "%s is stuck in SUBMITTING since its attempt %d", p.ID, p.Attempts)
		l, err := w.leases.Acquire(ctx, "payout:"+p.ID, ttl) // waits out the crashed worker's lease
		if err != nil {
			return settled, err
		}
		ref, found, err := w.lookup(ctx, p.IdempotencyKey)
		if err != nil {
			l.Release(ctx)
			return settled, err
		}
		if !found {
			// Never reached the provider: safe to submit again, same key.
			w.env.Logf(w.name, "the provider has no payout with key %s: submitting again", p.IdempotencyKey)
			if _, err := w.intents.BeginSubmit(ctx, w.env.Pool, p.ID, l.Fence()); err != nil {
				l.Release(ctx)
				return settled, err
			}
			if ref, err = w.post(ctx, p.IdempotencyKey, p.ID, p.AmountCents); err != nil {
				l.Release(ctx)
				return settled, err
			}
		} else {
			w.env.Logf(w.name, "the provider says key %s was paid: ref %s", p.IdempotencyKey, ref)
		}
		q, err := w.intents.MarkSubmitted(ctx, w.env.Pool, p.ID, l.Fence(), ref)
		l.Release(ctx)
		if err != nil {
			return settled, err
		}
		w.env.Logf(w.name, "%s -> %s, ref %s (fence %d)", q.ID, q.State, q.ProviderRef, l.Fence())
		settled++
	}
	return settled, nil
}

type payoutRequest struct {
	PayoutID    string `json:"payout_id"`
	AmountCents int64  `json:"amount_cents"`
}

type payoutAnswer struct {
	Ref string `json:"ref"`
}

func (w *worker) post(ctx context.Context, key, id string, cents int64) (string, error) {
	body, _ := json.Marshal(payoutRequest{PayoutID: id, AmountCents: cents})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.prov.url+"/payouts", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := w.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var a payoutAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode/100 != 2 {
		return "", fmt.Errorf("provider answered %s: %v", resp.Status, err)
	}
	if resp.Header.Get("Idempotent-Replayed") == "true" {
		w.env.Logf("provider", "replayed the original result for key %s: ref %s (no new payout)", key, a.Ref)
	}
	return a.Ref, nil
}

func (w *worker) lookup(ctx context.Context, key string) (ref string, found bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.prov.url+"/payouts?idempotency_key="+key, nil)
	if err != nil {
		return "", false, err
	}
	resp, err := w.http.Do(req)
	if err != nil {
		return "", false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return "", false, nil
	}
	var a payoutAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		return "", false, err
	}
	return a.Ref, true, nil
}

func describe(err error) string {
	var ne net.Error
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Sprintf("TIMEOUT after %v: the outcome is unknown", clientTimeout)
	case errors.Is(err, pgguard.ErrStaleFence):
		return "REFUSED, stale fence: " + err.Error()
	}
	return err.Error()
}

// provider is a fake payment provider. It pays on POST /payouts; with an
// Idempotency-Key it pays once per key and replays the first result for a
// repeat. GET /payouts?idempotency_key=K looks a payout up by key. A payout
// marked with slowFirst is paid at once but answered late, the first time.
type provider struct {
	url string
	srv *http.Server
	env *story.Env

	mu      sync.Mutex
	byKey   map[string]string // idempotency key -> ref
	ledger  map[string]int    // payout id -> times paid
	refs    map[string]string // payout id -> last ref
	slow    map[string]bool
	nreq    int
	nreplay int
}

func startProvider(env *story.Env) (*provider, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &provider{url: "http://" + ln.Addr().String(), env: env,
		byKey: map[string]string{}, ledger: map[string]int{}, refs: map[string]string{}, slow: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /payouts", p.pay)
	mux.HandleFunc("GET /payouts", p.get)
	p.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go p.srv.Serve(ln)
	return p, nil
}

func (p *provider) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p.srv.Shutdown(ctx)
}

func (p *provider) slowFirst(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.slow[id] = true
}

func (p *provider) pay(w http.ResponseWriter, r *http.Request) {
	var req payoutRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	p.mu.Lock()
	p.nreq++
	if ref, ok := p.byKey[key]; ok && key != "" {
		p.nreplay++
		p.mu.Unlock()
		w.Header().Set("Idempotent-Replayed", "true")
		json.NewEncoder(w).Encode(payoutAnswer{Ref: ref})
		return
	}
	p.ledger[req.PayoutID]++
	ref := fmt.Sprintf("pr_%d", p.nreq)
	p.refs[req.PayoutID] = ref
	if key != "" {
		p.byKey[key] = ref
	}
	slow := p.slow[req.PayoutID]
	delete(p.slow, req.PayoutID)
	p.mu.Unlock()
	p.env.Logf("provider", "PAID %s: %d cents, ref %s", req.PayoutID, req.AmountCents, ref)
	if slow {
		select { // the money moved; the answer is late
		case <-time.After(slowAnswer):
		case <-r.Context().Done():
			return
		}
	}
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(payoutAnswer{Ref: ref})
}

func (p *provider) get(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	ref, ok := p.byKey[r.URL.Query().Get("idempotency_key")]
	p.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	json.NewEncoder(w).Encode(payoutAnswer{Ref: ref})
}

func (p *provider) paid(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ledger[id]
}

func (p *provider) ref(id string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refs[id]
}

func (p *provider) requests() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nreq
}

func (p *provider) replays() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nreplay
}
