package keepalive

import (
	"context"
	"sync"
	"time"
)

// Item is what a Keeper keeps alive. Deadline is its local deadline, which
// the renew call moves (with Schedule.Extend) for each item it renews.
type Item interface {
	comparable
	Deadline() time.Time
}

// RenewFunc renews items in one call (one statement) and returns those whose
// lease it found lost. An error means nothing is known: every item is
// retried, and each stays valid until its local deadline. ctx ends at the
// earliest local deadline among items, or an interval after the call began.
type RenewFunc[T Item] func(ctx context.Context, items []T) (lost []T, err error)

// Keeper keeps the leases of many items of one Schedule alive: Run renews
// the items due, all in one RenewFunc call per round, and each item's local
// deadline is a timer that reports LocalDeadline when it passes. It costs
// one goroutine (Run) whatever the number of items.
type Keeper[T Item] struct {
	s     Schedule
	renew RenewFunc[T]
	wake  chan struct{} // an item came due earlier than Run waits for

	mu    sync.Mutex
	items map[T]*kept
	next  time.Time // earliest due among the items not in a round; zero: none
}

type kept struct {
	lost  func(Cause)
	timer *time.Timer // fires at the local deadline
	due   time.Time   // next renewal
	ended bool        // lost or removed: no more renewals, lost is not called again
}

// NewKeeper returns a keeper of items renewed by renew on schedule s.
func NewKeeper[T Item](s Schedule, renew RenewFunc[T]) *Keeper[T] {
	return &Keeper[T]{s: s, renew: renew, wake: make(chan struct{}, 1), items: map[T]*kept{}}
}

// Add starts keeping item, whose lease was just acquired: its first renewal
// is due an interval from now. lost is called once, from a timer or from
// Run, if the lease is lost (Gone, LocalDeadline) before Remove.
func (k *Keeper[T]) Add(item T, lost func(Cause)) {
	e := &kept{lost: lost, due: time.Now().Add(k.s.Interval())}
	left := time.Until(item.Deadline())
	k.mu.Lock()
	e.timer = time.AfterFunc(left, func() { k.deadlinePassed(item, e) })
	k.items[item] = e
	earlier := k.next.IsZero() || e.due.Before(k.next)
	if earlier {
		k.next = e.due
	}
	k.mu.Unlock()
	if earlier {
		select {
		case k.wake <- struct{}{}:
		default:
		}
	}
}

// Remove stops keeping item; lost is not called after it returns.
func (k *Keeper[T]) Remove(item T) {
	k.mu.Lock()
	if e, ok := k.items[item]; ok {
		e.ended = true
		e.timer.Stop()
		delete(k.items, item)
	}
	k.mu.Unlock()
}

// Len is the number of items kept (lost ones included until removed).
func (k *Keeper[T]) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.items)
}

// deadlinePassed runs on e's timer: the item is lost unless a renewal moved
// its deadline meanwhile, in which case the timer waits for the new one.
func (k *Keeper[T]) deadlinePassed(item T, e *kept) {
	left := time.Until(item.Deadline())
	k.mu.Lock()
	if e.ended {
		k.mu.Unlock()
		return
	}
	if left > 0 {
		e.timer.Reset(left)
		k.mu.Unlock()
		return
	}
	k.end(e)
	k.mu.Unlock()
	e.lost(LocalDeadline)
}

// end marks e lost; k.mu is held.
func (k *Keeper[T]) end(e *kept) {
	e.ended = true
	e.timer.Stop()
}

// Run renews the items as they come due until stop is closed.
func (k *Keeper[T]) Run(stop <-chan struct{}) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		k.mu.Lock()
		next := k.next
		k.mu.Unlock()
		if next.IsZero() {
			t.Stop() // since Go 1.23 a stopped timer delivers nothing stale
		} else {
			t.Reset(time.Until(next))
		}
		select {
		case <-stop:
			return
		case <-k.wake:
			continue
		case <-t.C:
		}
		k.round()
	}
}

// round renews the items due now in one call and schedules each one's next
// renewal by the outcome.
func (k *Keeper[T]) round() {
	sent := time.Now()
	items, until := k.collect(sent)
	if len(items) == 0 {
		return
	}
	// A call that hangs must not hold up the next round for longer than
	// an interval, nor outlast the local deadlines it could save.
	ctx, cancel := context.WithDeadline(context.Background(), until)
	lost, err := k.renew(ctx, items)
	cancel()
	k.settle(items, lost, err, sent)
}

// collect returns the items due by now, plus those due within half an
// interval (renewing them a little early lets them share this round's call
// instead of each costing one of its own), and the deadline for the call.
// Items whose local deadline has passed are ended here rather than renewed:
// their timer is about to do it. It sets k.next to the earliest due among
// the items left out.
func (k *Keeper[T]) collect(now time.Time) (items []T, until time.Time) {
	until = now.Add(k.s.Interval())
	horizon := now.Add(k.s.Interval() / 2)
	var late []*kept
	k.mu.Lock()
	k.next = time.Time{}
	for item, e := range k.items {
		if e.ended {
			continue
		}
		if e.due.After(horizon) {
			if k.next.IsZero() || e.due.Before(k.next) {
				k.next = e.due
			}
			continue
		}
		d := item.Deadline()
		if !d.After(now) {
			k.end(e)
			late = append(late, e)
			continue
		}
		items = append(items, item)
		if d.Before(until) {
			until = d
		}
	}
	k.mu.Unlock()
	for _, e := range late {
		e.lost(LocalDeadline)
	}
	return items, until
}

// settle ends the items found lost and sets the others' next renewal: an
// interval after sent when the call succeeded, a retry from now when not.
func (k *Keeper[T]) settle(items, lost []T, err error, sent time.Time) {
	due := sent.Add(k.s.Next(true))
	if err != nil {
		due = time.Now().Add(k.s.Next(false))
	}
	isLost := make(map[T]bool, len(lost))
	for _, item := range lost {
		isLost[item] = true
	}
	var ended []*kept
	k.mu.Lock()
	for _, item := range items {
		e, ok := k.items[item]
		if !ok || e.ended {
			continue // removed or lost meanwhile
		}
		if isLost[item] {
			k.end(e)
			ended = append(ended, e)
			continue
		}
		e.due = due
		if k.next.IsZero() || due.Before(k.next) {
			k.next = due
		}
	}
	k.mu.Unlock()
	for _, e := range ended {
		e.lost(Gone)
	}
}
