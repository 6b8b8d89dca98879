package pgguard_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgfence/pgfence/pgguard"
	"github.com/pgfence/pgfence/pglease"
)

// The worker process: this test binary re-executed with workerEnv set. It
// talks line by line: commands on stdin, one answer line per command on
// stdout.
const (
	workerEnv    = "PGGUARD_TEST_WORKER"
	workerURLEnv = "PGGUARD_TEST_WORKER_URL"
)

// workerMain serves commands:
//
//	acquire <lease key> <ttl ms> <wait 0|1>  -> fence <n> | err <msg>
//	update <table> <row key> <writer>        -> guarded write with the lease's fence
//	raw <table> <row key> <writer>           -> RunFenced + a raw UPDATE without the fence predicate
//	claimwrite <table> <row key> <writer>    -> one transaction: ClaimFirst, then the guarded write
//	release                                  -> ok | err <msg>
//	exit
//
// Writes answer ok, stale <presented> <current>, or err <msg>. The worker
// never checks its lease before writing: a pause between such a check and
// the write is exactly what the resource must survive.
func workerMain() int {
	name := os.Getenv(workerEnv)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv(workerURLEnv))
	if err != nil {
		fmt.Println("err", err)
		return 1
	}
	defer pool.Close()
	client, err := pglease.New(pool, pglease.WithoutAutoRenew(), pglease.WithOwner(name),
		pglease.WithBackoff(5*time.Millisecond, 20*time.Millisecond))
	if err != nil {
		fmt.Println("err", err)
		return 1
	}
	defer client.Close()
	guards := map[string]*pgguard.Guard{}
	guard := func(table string) (*pgguard.Guard, error) {
		if g, ok := guards[table]; ok {
			return g, nil
		}
		g, err := pgguard.NewGuard(ctx, pool, pgguard.Table{Name: table, KeyColumn: "job_id"})
		guards[table] = g
		return g, err
	}
	answer := func(err error) {
		var se *pgguard.StaleFenceError
		switch {
		case err == nil:
			fmt.Println("ok")
		case errors.As(err, &se):
			fmt.Println("stale", se.Presented, se.Current)
		default:
			fmt.Println("err", strings.ReplaceAll(err.Error(), "\n", " "))
		}
	}
	var lease *pglease.Lease
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		switch {
		case f[0] == "exit":
			cancel()
			return 0
		case f[0] == "acquire" && len(f) == 4:
			ms, _ := strconv.Atoi(f[2])
			var l *pglease.Lease
			if f[3] == "1" {
				l, err = client.Acquire(cctx, f[1], time.Duration(ms)*time.Millisecond)
			} else {
				l, err = client.TryAcquire(cctx, f[1], time.Duration(ms)*time.Millisecond)
			}
			if err != nil {
				answer(err)
			} else {
				lease = l
				fmt.Println("fence", l.Fence())
			}
		case f[0] == "release":
			answer(lease.Release(cctx))
		case len(f) == 4 && (f[0] == "update" || f[0] == "raw" || f[0] == "claimwrite"):
			table, key, writer := f[1], f[2], f[3]
			g, err := guard(table)
			if err != nil {
				answer(err)
				break
			}
			switch f[0] {
			case "update":
				err = g.Update(cctx, pool, key, lease.Fence(), pgguard.Values{"status": "DONE", "writer": writer})
			case "raw":
				err = pgguard.RunFenced(cctx, pool, lease.Fence(), func(tx pgx.Tx) error {
					// Hand-written, and it forgot the fence predicate.
					_, err := tx.Exec(cctx, "UPDATE "+pgx.Identifier{table}.Sanitize()+" SET status = 'DONE', writer = $1 WHERE job_id = $2", writer, key)
					return err
				})
			case "claimwrite":
				err = pgx.BeginFunc(cctx, pool, func(tx pgx.Tx) error {
					var status string
					if err := g.ClaimFirst(cctx, tx, key, lease.Fence(), []string{"status"}, &status); err != nil {
						return err
					}
					return g.Update(cctx, tx, key, lease.Fence(), pgguard.Values{"status": "DONE", "writer": writer})
				})
			}
			answer(err)
		default:
			fmt.Println("err unknown command", strconv.Quote(in.Text()))
		}
		cancel()
	}
	return 0
}
