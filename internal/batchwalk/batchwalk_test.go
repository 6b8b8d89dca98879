package batchwalk

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestRunStopsAfterTheLastBatch(t *testing.T) {
	calls := 0
	err := Run(context.Background(), func(context.Context) (bool, error) {
		calls++
		return calls < 3, nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("Run: err %v after %d batches, want nil after 3", err, calls)
	}
}

func TestRunReturnsTheStepError(t *testing.T) {
	boom := errors.New("boom")
	calls := 0
	err := Run(context.Background(), func(context.Context) (bool, error) {
		calls++
		return true, boom
	})
	if !errors.Is(err, boom) || calls != 1 {
		t.Fatalf("Run: err %v after %d batches, want boom after 1", err, calls)
	}
}

func TestRunRestsAsLongAsTheBatchTook(t *testing.T) {
	const took = 20 * time.Millisecond
	var starts []time.Time
	err := Run(context.Background(), func(context.Context) (bool, error) {
		starts = append(starts, time.Now())
		time.Sleep(took) // the batch's own duration, which Run measures
		return len(starts) < 2, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if gap := starts[1].Sub(starts[0]); gap < 2*took {
		t.Fatalf("second batch began %v after the first, want at least %v (batch + rest)", gap, 2*took)
	}
}

func TestRunEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := Run(ctx, func(context.Context) (bool, error) {
		calls++
		cancel() // ends during the rest that follows this batch
		return true, nil
	})
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Fatalf("Run: err %v after %d batches, want context.Canceled after 1", err, calls)
	}
}
