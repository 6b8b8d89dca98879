package pgfence

import (
	"errors"
	"sync"
	"testing"
)

// 16 goroutines check fences of timelines 1..64 in shuffled orders: the mark
// ends at the highest timeline, a fence of the mark's own timeline is always
// accepted, and every refusal names a timeline below one already seen.
func TestTimelineMarkConcurrent(t *testing.T) {
	var m TimelineMark
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 64 {
				tl := int64((i*7+g*13)%64 + 1)
				err := m.Check(tl<<timelineShift | int64(g+1))
				var stale *staleTimelineError
				switch {
				case err == nil:
				case errors.As(err, &stale) && errors.Is(err, ErrStaleTimeline):
					if stale.timeline != tl || stale.seen <= tl {
						t.Errorf("refusal %+v for timeline %d", stale, tl)
					}
				default:
					t.Errorf("unexpected error %v", err)
				}
			}
		})
	}
	wg.Wait()
	if h := m.high.Load(); h != 64 {
		t.Fatalf("mark %d, want 64", h)
	}
	if err := m.Check(64<<timelineShift | 99); err != nil {
		t.Errorf("a fence of the mark's own timeline was refused: %v", err)
	}
	if err := m.Check(0); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("fence 0: %v, want ErrInvalidInput", err)
	}
}

// The check a pglease client makes on every grant: one atomic load when
// the timeline has not changed.
func BenchmarkTimelineMarkCheck(b *testing.B) {
	var m TimelineMark
	fence := int64(3)<<timelineShift | 1
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := m.Check(fence); err != nil {
				b.Fatal(err)
			}
		}
	})
}
