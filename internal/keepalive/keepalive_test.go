package keepalive_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pgfence/pgfence/internal/keepalive"
)

func TestScheduleDefaults(t *testing.T) {
	sent := time.Now()
	s := keepalive.Schedule{TTL: 30 * time.Second}
	if got, want := s.Deadline(sent), sent.Add(27*time.Second); !got.Equal(want) {
		t.Errorf("deadline %v, want sent + TTL - TTL/10 = %v", got, want)
	}
	if got := s.Interval(); got != 10*time.Second {
		t.Errorf("interval %v, want TTL/3", got)
	}
	if got := s.Next(true); got != 10*time.Second {
		t.Errorf("next after success %v, want the interval", got)
	}
	if got := s.Next(false); got != keepalive.MaxRetry {
		t.Errorf("next after failure %v, want the cap %v", got, keepalive.MaxRetry)
	}
}

func TestScheduleOptions(t *testing.T) {
	sent := time.Now()
	s := keepalive.Schedule{TTL: time.Second, Margin: 300 * time.Millisecond, Every: 400 * time.Millisecond}
	if got, want := s.Deadline(sent), sent.Add(700*time.Millisecond); !got.Equal(want) {
		t.Errorf("deadline %v, want sent + TTL - margin = %v", got, want)
	}
	if got := s.Next(true); got != 400*time.Millisecond {
		t.Errorf("next after success %v, want Every", got)
	}
	if got := s.Next(false); got != 100*time.Millisecond {
		t.Errorf("next after failure %v, want Every/4 (under the cap)", got)
	}
}

func TestScheduleExtendNeverMovesBack(t *testing.T) {
	s := keepalive.Schedule{TTL: time.Second}
	now := time.Now()
	cur := s.Deadline(now)
	if got := s.Extend(cur, now.Add(-time.Second)); !got.Equal(cur) {
		t.Errorf("an older renewal moved the deadline back to %v", got)
	}
	if got, want := s.Extend(cur, now.Add(time.Second)), s.Deadline(now.Add(time.Second)); !got.Equal(want) {
		t.Errorf("extend %v, want %v", got, want)
	}
}

func TestCauseNames(t *testing.T) {
	// The names are metric attribute values: dashboards depend on them.
	want := map[keepalive.Cause]string{
		keepalive.Expired: "expired", keepalive.TakenOver: "taken_over", keepalive.LocalDeadline: "local_deadline",
		keepalive.ReleaseFailed: "release_failed", keepalive.Gone: "unknown",
	}
	for c, name := range want {
		if c.String() != name {
			t.Errorf("cause %d is %q, want %q", c, c.String(), name)
		}
		if c.Reason() == "" || c.Reason() == name {
			t.Errorf("cause %s has no reason in words", c)
		}
	}
	if got := keepalive.NumCauses.String(); got != "Cause(6)" {
		t.Errorf("out of range cause is %q", got)
	}
}

// item is a kept item whose deadline the renew calls move.
type item struct {
	id       int
	mu       sync.Mutex
	deadline time.Time
}

func (i *item) Deadline() time.Time {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.deadline
}

func (i *item) extend(s keepalive.Schedule, sent time.Time) {
	i.mu.Lock()
	i.deadline = s.Extend(i.deadline, sent)
	i.mu.Unlock()
}

func newItem(s keepalive.Schedule, id int) *item {
	return &item{id: id, deadline: s.Deadline(time.Now())}
}

// run starts k.Run and returns its stop.
//
// The tests of what the keeper does at given times run in a synctest
// bubble (synctest.Test): its clock is virtual and moves only when every
// goroutine of the bubble is waiting, so a loaded machine can neither spread
// Adds made "together" apart nor make a timer late, and every round and
// deadline they assert happens when the schedule says. The concurrency test
// runs on the real clock.
func run(k interface{ Run(<-chan struct{}) }) func() {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { k.Run(stop); close(done) }()
	return func() { close(stop); <-done }
}

// Items added together by many goroutines are renewed together, in one call
// per round, and stay alive past their first deadlines.
func TestKeeperRenewsAllDueInOneCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := keepalive.Schedule{TTL: 600 * time.Millisecond}
		calls := make(chan []*item, 100)
		k := keepalive.NewKeeper(s, func(ctx context.Context, items []*item) ([]*item, error) {
			sent := time.Now()
			for _, i := range items {
				i.extend(s, sent)
			}
			calls <- items
			return nil, nil
		})
		const n = 200
		items := make([]*item, n)
		var wg sync.WaitGroup
		for g := range 20 {
			wg.Go(func() {
				for i := g; i < n; i += 20 {
					items[i] = newItem(s, i)
					k.Add(items[i], func(c keepalive.Cause) { t.Errorf("item %d lost: %v", i, c) })
				}
			})
		}
		wg.Wait()
		defer func() {
			for _, i := range items {
				k.Remove(i) // the deadline timers outlive Run
			}
		}()
		stop := run(k)
		defer stop()
		// Three TTLs: the items outlive two of their first deadlines.
		end := time.After(3 * s.TTL)
		rounds := 0
		for {
			select {
			case batch := <-calls:
				rounds++
				if len(batch) != n {
					t.Fatalf("round %d renewed %d items, want all %d in one call", rounds, len(batch), n)
				}
				continue
			case <-end:
			}
			break
		}
		// An interval apart, give or take half of one: 9 rounds, at most 18.
		if rounds < 6 || rounds > 18 {
			t.Fatalf("%d rounds in three TTLs, want about nine", rounds)
		}
		if k.Len() != n {
			t.Fatalf("keeping %d items, want %d", k.Len(), n)
		}
	})
}

// An item the renew call finds lost is reported Gone at once and renewed no
// more; the others go on.
func TestKeeperReportsLostItems(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := keepalive.Schedule{TTL: 300 * time.Millisecond}
		a, b := newItem(s, 1), newItem(s, 2)
		calls := make(chan []*item, 100)
		k := keepalive.NewKeeper(s, func(ctx context.Context, items []*item) ([]*item, error) {
			calls <- items
			var lost []*item
			for _, i := range items {
				if i == a {
					lost = append(lost, i)
				} else {
					i.extend(s, time.Now())
				}
			}
			return lost, nil
		})
		causes := make(chan keepalive.Cause, 2)
		k.Add(a, func(c keepalive.Cause) { causes <- c })
		k.Add(b, func(c keepalive.Cause) { t.Errorf("b lost: %v", c) })
		defer k.Remove(b)
		stop := run(k)
		defer stop()
		if got := <-calls; len(got) != 2 {
			t.Fatalf("first round renewed %d items, want 2", len(got))
		}
		if c := <-causes; c != keepalive.Gone {
			t.Fatalf("a lost with %v, want Gone", c)
		}
		if got := <-calls; len(got) != 1 || got[0] != b {
			t.Fatalf("second round renewed %v, want b alone", got)
		}
		if len(causes) != 0 {
			t.Fatal("a reported lost twice")
		}
	})
}

// When every renewal fails, the keeper retries after Schedule.Retry until the
// local deadline, and then reports LocalDeadline, not before it.
func TestKeeperRetriesUntilLocalDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := keepalive.Schedule{TTL: 400 * time.Millisecond}
		var mu sync.Mutex
		var at []time.Time
		k := keepalive.NewKeeper(s, func(ctx context.Context, items []*item) ([]*item, error) {
			mu.Lock()
			at = append(at, time.Now())
			mu.Unlock()
			return nil, errors.New("connection refused")
		})
		it := newItem(s, 1)
		lostAt := make(chan time.Time, 1)
		causes := make(chan keepalive.Cause, 1)
		k.Add(it, func(c keepalive.Cause) { lostAt <- time.Now(); causes <- c })
		stop := run(k)
		defer stop()
		when := <-lostAt
		if c := <-causes; c != keepalive.LocalDeadline {
			t.Fatalf("lost with %v, want LocalDeadline", c)
		}
		if when.Before(it.Deadline()) {
			t.Fatalf("lost %v before its deadline", it.Deadline().Sub(when))
		}
		mu.Lock()
		defer mu.Unlock()
		// First attempt an interval in (133ms), then every TTL/12 (33ms)
		// until 360ms: about seven attempts.
		if len(at) < 4 {
			t.Fatalf("%d attempts before the deadline, want retries every %v", len(at), s.Retry())
		}
		for i := 1; i < len(at); i++ {
			if gap := at[i].Sub(at[i-1]); gap < s.Retry() {
				t.Fatalf("attempt %d came %v after the last, before the retry delay %v", i, gap, s.Retry())
			}
		}
	})
}

// A call that hangs is cut at the earliest local deadline among its items
// (here before an interval has passed since the call began).
func TestKeeperBoundsTheCallByTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := keepalive.Schedule{TTL: 300 * time.Millisecond, Every: 200 * time.Millisecond}
		it := newItem(s, 1)
		ended := make(chan time.Time, 10)
		k := keepalive.NewKeeper(s, func(ctx context.Context, items []*item) ([]*item, error) {
			<-ctx.Done()
			ended <- time.Now()
			return nil, ctx.Err()
		})
		causes := make(chan keepalive.Cause, 1)
		k.Add(it, func(c keepalive.Cause) { causes <- c })
		stop := run(k)
		defer stop()
		if c := <-causes; c != keepalive.LocalDeadline {
			t.Fatalf("lost with %v", c)
		}
		if at := <-ended; at.Before(it.Deadline()) || at.Sub(it.Deadline()) > s.TTL {
			t.Fatalf("the hung call ended %v after the deadline", at.Sub(it.Deadline()))
		}
	})
}

// Without Run the deadline timers still end items; Remove stops them.
func TestKeeperDeadlineAndRemove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := keepalive.Schedule{TTL: 50 * time.Millisecond}
		k := keepalive.NewKeeper(s, func(context.Context, []*item) ([]*item, error) { return nil, nil })
		kept, removed := newItem(s, 1), newItem(s, 2)
		causes := make(chan keepalive.Cause, 1)
		k.Add(kept, func(c keepalive.Cause) { causes <- c })
		k.Add(removed, func(c keepalive.Cause) { t.Errorf("removed item reported lost: %v", c) })
		k.Remove(removed)
		if c := <-causes; c != keepalive.LocalDeadline {
			t.Fatalf("lost with %v", c)
		}
		// removed's deadline is the same as kept's, which has passed.
		if k.Len() != 1 {
			t.Fatalf("keeping %d items, want the lost one until it is removed", k.Len())
		}
		k.Remove(kept)
		if k.Len() != 0 {
			t.Fatalf("keeping %d items after removing all", k.Len())
		}
	})
}

// Many goroutines add and remove items while Run renews them: no race, no
// item reported after its removal, none lost while renewals succeed.
func TestKeeperConcurrentAddRemove(t *testing.T) {
	s := keepalive.Schedule{TTL: 100 * time.Millisecond}
	k := keepalive.NewKeeper(s, func(ctx context.Context, items []*item) ([]*item, error) {
		sent := time.Now()
		for _, i := range items {
			i.extend(s, sent)
		}
		return nil, nil
	})
	stop := run(k)
	defer stop()
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 50 {
				it := newItem(s, g*1000+i)
				var mu sync.Mutex
				removed := false
				k.Add(it, func(c keepalive.Cause) {
					mu.Lock()
					defer mu.Unlock()
					if removed {
						t.Errorf("item %d reported %v after removal", it.id, c)
					}
				})
				time.Sleep(time.Duration(i%7) * 10 * time.Millisecond) // the item's "work"
				k.Remove(it)
				mu.Lock()
				removed = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if k.Len() != 0 {
		t.Fatalf("keeping %d items after removing all", k.Len())
	}
}
