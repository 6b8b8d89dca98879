package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/examples/story"
	"github.com/pgfence/pgfence/pgguard"
	"github.com/pgfence/pgfence/pglease"
)

const schema = `
-- The downstream resource: a device's desired state, and the commands it
-- applied, in order.
CREATE TABLE controller (
  device     text   PRIMARY KEY,
  setpoint   int    NOT NULL,
  set_by     text   NOT NULL,
  last_fence bigint NOT NULL DEFAULT 0
);
INSERT INTO controller VALUES ('pump-1', 0, 'nobody', 0);
CREATE TABLE applied_commands (
  id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  epoch    bigint NOT NULL,
  leader   text   NOT NULL,
  setpoint int    NOT NULL
);
`

// ttl is how long a leader keeps its lease without renewing it. Only the
// cut-off leader's lease is meant to run out; every other term, node-1's
// before the cut included, must outlast a renewal late by a loaded
// machine's pause. With a renewal every second and the lease given up
// 2.7 s after the last one was sent, a pause up to 1.7 s costs no term; the
// cut-off leader is deposed up to 3 s after its last renewal.
const (
	key     = "leader:scheduler"
	ttl     = 3 * time.Second
	maxConn = 2
)

type node struct {
	name   string
	pool   *pgxpool.Pool
	leases *pglease.Client
	guard  *pgguard.Guard
	env    *story.Env

	// For the node that gets cut off: closed when it is frozen, and the
	// channel to wait on until it resumes.
	freezeAfter int // commands before it freezes; 0: never
	frozen      chan struct{}
	resume      chan struct{}

	mu         sync.Mutex
	epochs     []int64
	commands   int
	staleErr   error // what the downstream said to the command after the freeze
	staleEpoch int64
}

func main() {
	story.Main("leader election (epoch = fence; the downstream refuses the old epoch)", run)
}

func run(ctx context.Context, env *story.Env, v *story.Verdict) error {
	if _, err := env.Pool.Exec(ctx, schema); err != nil {
		return err
	}
	var nodes []*node
	for i := 1; i <= 3; i++ {
		pool, err := env.NewPool(ctx, maxConn)
		if err != nil {
			return err
		}
		n := &node{name: fmt.Sprintf("node-%d", i), pool: pool, env: env}
		n.leases, err = pglease.New(pool, pglease.WithOwner(n.name), pglease.WithBackoff(10*time.Millisecond, 100*time.Millisecond))
		if err != nil {
			return err
		}
		defer n.leases.Close()
		n.guard, err = pgguard.NewGuard(ctx, pool, pgguard.Table{Name: "controller", KeyColumn: "device"})
		if err != nil {
			return err
		}
		nodes = append(nodes, n)
	}
	first := nodes[0]
	first.freezeAfter, first.frozen, first.resume = 3, make(chan struct{}), make(chan struct{})

	campaignCtx, stopCampaigns := context.WithCancel(ctx)
	var wg sync.WaitGroup
	campaign := func(n *node) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := n.leases.Campaign(campaignCtx, key, ttl, n.lead)
			if !errors.Is(err, context.Canceled) {
				env.Logf(n.name, "campaign ended: %v", err)
			}
		}()
	}
	defer func() { stopCampaigns(); wg.Wait() }()

	env.Section("node-1 campaigns first and leads; node-2 and node-3 campaign and wait")
	campaign(first)
	if err := story.WaitFor(ctx, func() bool { return first.epochCount() > 0 }); err != nil {
		return err
	}
	campaign(nodes[1])
	campaign(nodes[2])

	if err := story.WaitFor(ctx, func() bool {
		select {
		case <-first.frozen:
			return true
		default:
			return false
		}
	}); err != nil {
		return err
	}
	env.Section("node-1 is cut off: it cannot renew, and it does not know")
	// Hold node-1's connections: its renewals and writes wait, as in a
	// freeze or a partition. Its lease runs out by the database clock.
	var held []*pgxpool.Conn
	for range maxConn {
		c, err := first.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		held = append(held, c)
	}
	release := func() {
		for _, c := range held {
			c.Release()
		}
		held = nil
	}
	defer release()
	if err := story.WaitFor(ctx, func() bool { return nodes[1].commandCount()+nodes[2].commandCount() >= 2 }); err != nil {
		return err
	}
	h, _, err := nodes[1].leases.Holder(ctx, key)
	if err != nil {
		return err
	}
	env.Logf("lock", "holder of %s now: %s, epoch %d", key, h.Owner, h.Fence)

	env.Section("node-1 comes back, still believing it leads, and sends one more command")
	release()
	close(first.resume)
	if err := story.WaitFor(ctx, func() bool { first.mu.Lock(); defer first.mu.Unlock(); return first.staleEpoch != 0 }); err != nil {
		return err
	}
	// The leadership carries on: one more command is applied after the
	// refusal.
	sofar := totalCommands(nodes)
	if err := story.WaitFor(ctx, func() bool { return totalCommands(nodes) > sofar }); err != nil {
		return err
	}
	stopCampaigns()
	wg.Wait()

	env.Section("read back from the downstream")
	rows, _ := env.Pool.Query(ctx, `SELECT epoch, leader FROM applied_commands ORDER BY id`)
	type applied struct {
		Epoch  int64
		Leader string
	}
	log, err := pgx.CollectRows(rows, pgx.RowToStructByPos[applied])
	if err != nil {
		return err
	}
	monotonic, leaders := true, map[string]int64{}
	for i, a := range log {
		if i > 0 && a.Epoch < log[i-1].Epoch {
			monotonic = false
		}
		leaders[a.Leader] = a.Epoch
	}
	env.Note("%d commands applied, from %d leader(s): %v; epochs never went down: %v", len(log), len(leaders), leaders, monotonic)

	first.mu.Lock()
	staleErr, staleEpoch := first.staleErr, first.staleEpoch
	e1 := first.epochs[0]
	first.mu.Unlock()
	var e2 int64
	for _, n := range nodes[1:] {
		n.mu.Lock()
		if len(n.epochs) > 0 && (e2 == 0 || n.epochs[0] < e2) {
			e2 = n.epochs[0]
		}
		n.mu.Unlock()
	}
	v.Check(e2 > e1, "the next leader's epoch is higher than the deposed one's (%d > %d)", e2, e1)
	v.Check(staleEpoch == e1 && errors.Is(staleErr, pgguard.ErrStaleFence),
		"the downstream refused the deposed leader's command with the old epoch")
	v.Check(monotonic && len(leaders) >= 2, "the downstream applied commands from %d leaders with epochs that never went down", len(leaders))
	return nil
}

// lead is one term of leadership: send a command to the downstream every
// 100ms until leadership ends.
func (n *node) lead(ctx context.Context, term *pglease.Lease) error {
	epoch := term.Fence() // the leader's epoch
	n.mu.Lock()
	n.epochs = append(n.epochs, epoch)
	n.mu.Unlock()
	n.env.Logf(n.name, "LEADS with epoch %d", epoch)
	setpoint := 0
	for {
		setpoint += 10
		if err := n.command(ctx, epoch, setpoint); err != nil {
			n.env.Logf(n.name, "command refused: %v; stepping down", err)
			return nil
		}
		if n.freezeAfter > 0 && n.commandCount() == n.freezeAfter {
			n.env.Logf(n.name, "freezes (a long pause); it is still leader in its own mind")
			close(n.frozen)
			<-n.resume
			// Back: a careful leader would look at ctx here; this one had the
			// command already on its way.
			n.env.Logf(n.name, "resumes; its leadership context says: %v", context.Cause(ctx))
			err := n.command(context.WithoutCancel(ctx), epoch, setpoint+1000)
			n.mu.Lock()
			n.staleErr, n.staleEpoch = err, epoch
			n.mu.Unlock()
			return nil // Campaign releases and campaigns again
		}
		select {
		case <-ctx.Done():
			n.env.Logf(n.name, "steps down (epoch %d): %v", epoch, context.Cause(ctx))
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// command sets the pump's setpoint, carrying the leader's epoch as its
// fence, and logs it as applied, in one transaction.
func (n *node) command(ctx context.Context, epoch int64, setpoint int) error {
	err := pgx.BeginFunc(ctx, n.pool, func(tx pgx.Tx) error {
		if err := n.guard.Update(ctx, tx, "pump-1", epoch, pgguard.Values{"setpoint": setpoint, "set_by": n.name}); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO applied_commands (epoch, leader, setpoint) VALUES ($1, $2, $3)`, epoch, n.name, setpoint)
		return err
	})
	switch {
	case err == nil:
		n.mu.Lock()
		n.commands++
		n.mu.Unlock()
		n.env.Logf(n.name, "pump-1 setpoint := %d (epoch %d): applied", setpoint, epoch)
	case errors.Is(err, pgguard.ErrStaleFence):
		n.env.Logf("downstream", "REFUSED %s's setpoint %d: epoch %d is older than the newest it has seen", n.name, setpoint, epoch)
	}
	return err
}

func (n *node) epochCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.epochs)
}

func (n *node) commandCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.commands
}

func totalCommands(nodes []*node) int {
	n := 0
	for _, nd := range nodes {
		n += nd.commandCount()
	}
	return n
}
