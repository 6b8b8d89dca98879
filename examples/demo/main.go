package main

import (
	"context"
	"os"

	"github.com/pgfence/pgfence/examples/story"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == workerArg {
		os.Exit(runWorker(os.Args[2:]))
	}
	story.Main("the demo: a lease decides who may try, the fence decides which writes count", run)
}

// run tells the three scenes on the example's database.
func run(ctx context.Context, env *story.Env, v *story.Verdict) error {
	if _, err := env.Pool.Exec(ctx, schemaSQL); err != nil {
		return err
	}
	env.Note("times are scaled down: a lease lasts %v in scene 1 and %v in the stale-writer scenes, where a frozen worker stays frozen %v", competeTTL, ttl, freeze)
	env.Note("fences are large numbers (the server's WAL timeline in the high bits, a sequence below);")
	env.Note("all that matters is that a later grant's fence is larger")
	if err := compete(ctx, env, v); err != nil {
		return err
	}
	if err := staleFenced(ctx, env, v); err != nil {
		return err
	}
	return staleUnfenced(ctx, env, v)
}
