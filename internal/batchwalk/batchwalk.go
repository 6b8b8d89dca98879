package batchwalk

import (
	"context"
	"time"
)

// MaxRest bounds one rest, so that a batch slowed by a lock wait does not
// stall the walk for as long again.
const MaxRest = time.Second

// Run calls step until it reports that the walk is done, an error, or ctx
// ends; between two batches it rests as long as the last batch took (at most
// MaxRest). step reports more = false after the last batch (one that read
// fewer rows than its size). Run returns ctx's error when ctx ends first;
// what the batches already did stays done.
func Run(ctx context.Context, step func(ctx context.Context) (more bool, err error)) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		start := time.Now()
		more, err := step(ctx)
		if err != nil || !more {
			return err
		}
		if err := rest(ctx, min(time.Since(start), MaxRest)); err != nil {
			return err
		}
	}
}

func rest(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
