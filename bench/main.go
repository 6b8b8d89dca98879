package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are the command line, after defaults and smoke adjustments.
type options struct {
	dbURL     string
	redisAddr string
	duration  time.Duration
	rounds    int
	clients   []int
	workers   []int
	jobs      int
	only      map[string]bool
	smoke     bool
	out       string
	plots     string
	keys      int
	scaleRows int
	held      int
	waiters   int
	command   string
	timeout   time.Duration
	cpuprof   string
	// contenders, when not empty, are the only lease contenders that run
	// (for profiling one of them alone).
	contenders map[string]bool
}

var sections = []string{"leases", "coord", "handoff", "jobs", "pgbouncer", "scale", "memory"}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func parseFlags() (*options, error) {
	o := &options{}
	var clients, workers, only, contenders string
	defURL := os.Getenv("PGFENCE_DATABASE_URL")
	if defURL == "" {
		// No TLS over loopback: its encryption would weigh on the client
		// and server CPU that every contender shares (Redis has none).
		defURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	flag.StringVar(&o.dbURL, "db", defURL, "PostgreSQL server to benchmark on (env PGFENCE_DATABASE_URL); a database pgfence_bench_<random> is created there and dropped at the end")
	flag.StringVar(&o.redisAddr, "redis", "127.0.0.1:6379", "Redis for the redislock contender; unreachable = reported as skipped")
	flag.DurationVar(&o.duration, "duration", 2*time.Second, "length of one contender's turn in a round (leases)")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds; contenders alternate within each round, the starting one rotating")
	flag.StringVar(&clients, "clients", "1,8,32", "client counts for the lease workloads")
	flag.StringVar(&workers, "workers", "8,32", "worker counts for the job workloads")
	flag.IntVar(&o.jobs, "jobs", 20000, "jobs inserted up front for each job run")
	flag.StringVar(&only, "only", strings.Join(sections, ","), "sections to run: "+strings.Join(sections, ","))
	flag.BoolVar(&o.smoke, "smoke", false, "about one second per section, small sizes: checks that every contender works (for CI)")
	flag.StringVar(&o.out, "out", "", "Markdown page to write (default: BENCHMARKS.md at the repository root)")
	flag.StringVar(&o.out, "page", "", "the same as -out")
	flag.StringVar(&o.plots, "plots", "", "directory for the page's PNG plots, one per section (default: bench/plots beside the repository's BENCHMARKS.md, else <out>-plots)")
	flag.IntVar(&o.keys, "keys", 10000, "key space of the many-keys lease workload")
	flag.IntVar(&o.scaleRows, "scale-rows", 1000000, "rows for the scale section (lease rows, completed jobs)")
	flag.IntVar(&o.held, "held", 10000, "leases held at once in the memory section")
	flag.IntVar(&o.waiters, "waiters", 50, "waiters on one key in the hand-off section")
	flag.DurationVar(&o.timeout, "timeout", 30*time.Minute, "give up (and drop the database) after this long; -smoke: 3m")
	flag.StringVar(&o.cpuprof, "cpuprofile", "", "write the client's CPU profile of the whole run to this file (go tool pprof)")
	flag.StringVar(&contenders, "contenders", "", "lease contenders to run, comma-separated (default all: "+strings.Join(leaseOrder, ",")+"); to profile one alone")
	flag.Parse()
	if flag.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q; see -h", flag.Args())
	}
	o.command = commandLine()

	var err error
	if o.clients, err = parseInts("clients", clients); err != nil {
		return nil, err
	}
	if o.workers, err = parseInts("workers", workers); err != nil {
		return nil, err
	}
	o.only = map[string]bool{}
	for _, s := range strings.Split(only, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !contains(sections, s) {
			return nil, fmt.Errorf("-only: unknown section %q (known: %s)", s, strings.Join(sections, ","))
		}
		o.only[s] = true
	}
	if contenders != "" {
		o.contenders = map[string]bool{}
		for _, s := range strings.Split(contenders, ",") {
			s = strings.TrimSpace(s)
			if !contains(leaseOrder, s) {
				return nil, fmt.Errorf("-contenders: unknown contender %q (known: %s)", s, strings.Join(leaseOrder, ","))
			}
			o.contenders[s] = true
		}
	}
	if o.rounds < 1 || o.duration <= 0 || o.jobs < 1 || o.keys < 1 || o.held < 1 || o.waiters < 2 || o.scaleRows < 1000 {
		return nil, errors.New("-rounds, -duration, -jobs, -keys, -held must be positive, -waiters at least 2, -scale-rows at least 1000")
	}
	if o.smoke {
		// Small enough for CI (well under a minute in all), big enough that
		// every contender runs every statement it has.
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["duration"] {
			o.duration = 150 * time.Millisecond
		}
		if !set["rounds"] {
			o.rounds = 1
		}
		if !set["jobs"] {
			o.jobs = 300
		}
		if !set["scale-rows"] {
			o.scaleRows = 5000
		}
		if !set["held"] {
			o.held = 300
		}
		if !set["waiters"] {
			o.waiters = 5
		}
		if !set["timeout"] {
			o.timeout = 3 * time.Minute
		}
	}
	return o, resolvePaths(o)
}

// resolvePaths fills the default page and plot paths: the repository's
// BENCHMARKS.md (the directory holding bench/go.mod) with its plots in
// bench/plots, or plots beside any other page.
func resolvePaths(o *options) error {
	root, rootErr := repoRoot()
	if o.out == "" {
		if rootErr != nil {
			return rootErr
		}
		o.out = filepath.Join(root, "BENCHMARKS.md")
	}
	if o.plots == "" {
		if rootErr == nil && absPath(o.out) == filepath.Join(root, "BENCHMARKS.md") {
			o.plots = filepath.Join(root, "bench", "plots")
		} else {
			o.plots = strings.TrimSuffix(o.out, filepath.Ext(o.out)) + "-plots"
		}
	}
	return nil
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "bench", "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("cannot find the repository root (a directory with bench/go.mod) above %s; pass -out", dir)
		}
	}
}

func commandLine() string {
	args := []string{"go run ."}
	for _, a := range os.Args[1:] {
		args = append(args, a)
	}
	cmd := strings.Join(args, " ")
	if wd, err := os.Getwd(); err == nil && filepath.Base(wd) == "bench" {
		return "cd bench && " + cmd
	}
	return cmd
}

func parseInts(name, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 1000 {
			return nil, fmt.Errorf("-%s: %q is not a list of counts in [1, 1000], like 1,8,32", name, s)
		}
		out = append(out, n)
	}
	return out, nil
}

func contains[T comparable](xs []T, x T) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func run() error {
	o, err := parseFlags()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

	if o.cpuprof != "" {
		f, err := os.Create(o.cpuprof)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	be, err := openEnv(ctx, o)
	if err != nil {
		return err
	}
	defer be.close() // drops the database, also after Ctrl-C

	rep := &report{opts: o}
	rep.machine = machineInfo()
	rep.pg, err = pgInfo(ctx, be)
	if err != nil {
		return err
	}
	if !o.smoke {
		rep.fsync = runPgTestFsync(ctx)
	}
	type section struct {
		name string
		fn   func(context.Context, *env, *report) error
	}
	for _, s := range []section{
		{"leases", runLeases}, {"coord", runCoord}, {"handoff", runHandoff}, {"jobs", runJobs},
		{"pgbouncer", runBouncer}, {"scale", runScale}, {"memory", runMemory},
	} {
		if !o.only[s.name] {
			continue
		}
		t0 := time.Now()
		logf("== %s", s.name)
		if err := s.fn(ctx, be, rep); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		logf("== %s done in %v", s.name, time.Since(t0).Round(time.Second))
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	md, err := rep.markdown()
	if err != nil {
		return fmt.Errorf("plots: %w", err)
	}
	fmt.Println(md)
	if err := rep.writePage(md); err != nil {
		return err
	}
	logf("wrote %s and its plots in %s in %v (load average now %s)", o.out, o.plots, time.Since(start).Round(time.Second), machineInfo().load)
	if rep.failures > 0 {
		return fmt.Errorf("%d contender(s) failed; see the table", rep.failures)
	}
	return nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}
