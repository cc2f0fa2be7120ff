// Command compare benchmarks hybridlimit's three modes against peer rate
// limiters in one run, on one machine and one private redis-server that it
// starts on a free loopback port and stops at the end:
//
//	cd bench && go run ./cmd/compare
//
// For each contender: ns/op and allocs/op of a decision on an existing key,
// latency percentiles under parallel load, Redis commands per decision, and
// admitted/limit with 4 nodes offered twice the limit; then, for every
// contender that keeps its state in Redis, Redis CPU and commands per
// decision, and the callers' wait, under many keys drawn from a Zipf
// distribution (-keys, -zipf; -keys-only runs more workloads, our Async and
// Sync side by side);
// then three traffic shapes (a sticky burst, a burst on every node at once,
// an abusive client spread over the nodes) sent to our Async and Sync
// fleets and to a Gubernator cluster in its default and GLOBAL behaviours
// (-shapes-only runs them alone). It prints a Markdown report, writes it to
// -out, and draws -plot.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/bench/contender"
	"github.com/hybridlimit/hybridlimit/bench/keyload"
	"github.com/hybridlimit/hybridlimit/bench/measure"
	"github.com/hybridlimit/hybridlimit/internal/redisproc"
	"github.com/hybridlimit/hybridlimit/internal/workload"
)

type options struct {
	benchtime  time.Duration
	count      int
	load       time.Duration
	goroutines int
	fleet      time.Duration
	nodes      int
	policy     contender.Policy
	benchKeys  int
	many       keysOptions
	keysOnly   bool
	shapes     shapesOptions
	only       *regexp.Regexp
	out, plot  string
}

func main() {
	testing.Init() // testing.Benchmark reads -test.benchtime
	var o options
	var only string
	flag.DurationVar(&o.benchtime, "benchtime", 300*time.Millisecond, "run time of each serial `ns/op` benchmark")
	flag.IntVar(&o.count, "count", 5, "serial benchmark rounds, all contenders interleaved (the median is reported)")
	flag.DurationVar(&o.load, "load", time.Second, "duration of each parallel-load measurement")
	flag.IntVar(&o.goroutines, "goroutines", 16, "goroutines of the parallel load")
	flag.DurationVar(&o.fleet, "fleet", 5*time.Second, "duration of each accuracy run (nodes offered twice the limit)")
	flag.IntVar(&o.nodes, "nodes", 4, "nodes (separate instances, each with its own Redis client) of each accuracy run")
	flag.Int64Var(&o.policy.Rate, "rate", 1000, "limit of the accuracy runs: requests per second")
	flag.Int64Var(&o.policy.Burst, "burst", 100, "limit of the accuracy runs: burst")
	flag.IntVar(&o.benchKeys, "bench-keys", 100, "existing keys the serial and parallel benchmarks cycle through")
	flag.IntVar(&o.many.keys, "keys", 100_000, "keys of the many-keys workload (0 skips it)")
	flag.Float64Var(&o.many.zipf, "zipf", 1.1, "skew of the many-keys workload: the key of rank k is asked for in proportion to 1/k^zipf (0: uniform)")
	flag.Float64Var(&o.many.rate, "keys-rate", 20_000, "decisions per second offered in the many-keys workload, all nodes together")
	flag.Int64Var(&o.many.policy.Rate, "key-rate", 10, "every key's limit in the many-keys workload: requests per second")
	flag.Int64Var(&o.many.policy.Burst, "key-burst", 10, "every key's limit in the many-keys workload: burst")
	flag.DurationVar(&o.many.warmup, "keys-warmup", 3*time.Second, "load before the measured part of the many-keys workload")
	flag.DurationVar(&o.many.duration, "keys-duration", 10*time.Second, "measured part of the many-keys workload")
	flag.DurationVar(&o.many.interval, "keys-interval", 20*time.Millisecond, "SyncInterval of our Async contender in the many-keys workload")
	flag.DurationVar(&o.many.timeout, "keys-redis-timeout", time.Second, "RedisTimeout of our contenders in the many-keys workload")
	flag.IntVar(&o.many.workers, "keys-workers", keyload.DefaultWorkers, "workers calling each node in the many-keys workloads: at most that many callers wait on a node at once, the others queue (and their wait counts in the latency)")
	flag.DurationVar(&o.many.history, "keys-history", time.Minute, "traffic drawn (never sent) before each many-keys workload, for the steady-state share of first requests")
	flag.DurationVar(&o.many.drain, "keys-drain", keyload.DefaultDrain, "how long the many-keys workloads wait for answers after the last request is due")
	workloads := flag.String("keys-workloads", strings.Join(workloadIDs, ","), "the many-keys workloads -keys-only runs (bench-compare runs w1 alone)")
	flag.BoolVar(&o.many.peers, "keys-peers", false, "with -keys-only, run the peers that keep their state in Redis on W1 too")
	flag.IntVar(&o.many.client.nodes, "client-nodes", 6, "nodes of the per-client workloads (pinned, roundrobin, random)")
	flag.IntVar(&o.many.client.keys, "client-keys", 500_000, "keys of the per-client workloads")
	flag.Float64Var(&o.many.client.zipf, "client-zipf", 1.2, "Zipf skew of the per-client workloads")
	flag.Float64Var(&o.many.client.rate, "client-rate", 20_000, "decisions per second offered in the per-client workloads, all nodes together")
	flag.Int64Var(&o.many.client.policy.Rate, "client-key-rate", 1, "every key's limit in the per-client workloads: requests per second")
	flag.Int64Var(&o.many.client.policy.Burst, "client-key-burst", 1, "every key's limit in the per-client workloads: burst")
	flag.IntVar(&o.many.hot.nodes, "hot-nodes", 4, "nodes of the hot-key workload")
	flag.Int64Var(&o.many.hot.policy.Rate, "hot-rate", 1000, "the hot key's limit: requests per second")
	flag.Int64Var(&o.many.hot.policy.Burst, "hot-burst", 100, "the hot key's limit: burst")
	flag.Float64Var(&o.many.hot.over, "hot-over", 2, "the hot key's offered rate, in multiples of its limit's")
	flag.IntVar(&o.many.idle.nodes, "idle-nodes", 4, "nodes of the idle fleet")
	flag.DurationVar(&o.many.idle.burst, "idle-burst", 2*time.Second, "the idle fleet's traffic (W1's) before it rests")
	flag.DurationVar(&o.many.idle.rest, "idle-rest", 5*time.Second, "how long the idle fleet rests, measured (the first second apart)")
	flag.BoolVar(&o.keysOnly, "keys-only", false, "run only the many-keys workloads (no plot)")
	flag.BoolVar(&o.shapes.on, "shapes", true, "run the traffic shapes (hybridlimit and Gubernator)")
	flag.BoolVar(&o.shapes.only, "shapes-only", false, "run only the traffic shapes (no plot)")
	flag.Int64Var(&o.shapes.policy.Rate, "shapes-rate", 100, "the client's limit in the traffic shapes: requests per second")
	flag.Int64Var(&o.shapes.policy.Burst, "shapes-burst", 100, "the client's limit in the traffic shapes: burst (the size of every burst sent)")
	flag.IntVar(&o.shapes.rounds, "shapes-rounds", 3, "bursts of each burst shape, each after twice a full refill")
	flag.DurationVar(&o.shapes.abuse, "shapes-abuse", 5*time.Second, "how long the abusive client sends")
	flag.Float64Var(&o.shapes.over, "shapes-over", 4, "the abusive client's rate, in multiples of the limit's")
	flag.StringVar(&only, "only", "", "run only the contenders whose name matches this regexp")
	flag.StringVar(&o.out, "out", "results.md", "write the Markdown report here too (\"\" for stdout only)")
	flag.StringVar(&o.plot, "plot", "../docs/bench-compare.png", "write the plot here (.png or .svg; \"\" for none)")
	flag.Parse()
	if err := flag.Set("test.benchtime", o.benchtime.String()); err != nil {
		fatal(err)
	}
	var err error
	if o.only, err = regexp.Compile(only); err != nil {
		fatal(err)
	}
	if o.count < 1 || o.benchKeys < 1 || o.nodes < 1 || o.goroutines < 1 || o.policy.Rate < 1 || o.policy.Burst < 1 {
		fatal(errors.New("-count, -bench-keys, -nodes, -goroutines, -rate and -burst must be positive"))
	}
	if o.keysOnly && o.many.keys == 0 {
		fatal(errors.New("-keys-only with -keys 0: nothing to measure"))
	}
	if o.keysOnly && o.shapes.only {
		fatal(errors.New("-keys-only and -shapes-only: choose one"))
	}
	if o.shapes.only && !o.shapes.on {
		fatal(errors.New("-shapes-only with -shapes=false: nothing to measure"))
	}
	if s := o.shapes; s.on && (s.policy.Rate < 1 || s.policy.Burst < 1 || s.rounds < 1 || s.abuse <= 0 || s.over <= 0) {
		fatal(fmt.Errorf("shapes: -shapes-rate %d, -shapes-burst %d, -shapes-rounds %d, -shapes-abuse %v and -shapes-over %v must be positive",
			s.policy.Rate, s.policy.Burst, s.rounds, s.abuse, s.over))
	}
	if m := o.many; m.keys < 0 || m.keys > workload.MaxKeys || m.zipf < 0 || m.rate <= 0 || m.policy.Rate < 1 || m.policy.Burst < 1 ||
		m.duration <= 0 || m.warmup < 0 || m.interval < time.Millisecond || m.timeout <= 0 || m.workers < 0 || m.history < 0 || m.drain < 0 {
		fatal(fmt.Errorf("many keys: -keys %d (0 to %d), -zipf %v (0 or more), -keys-rate %v, -key-rate %d, -key-burst %d, -keys-duration %v, -keys-interval %v (1ms or more) and -keys-redis-timeout %v must be positive, -keys-warmup %v, -keys-workers %d, -keys-history %v and -keys-drain %v not negative",
			m.keys, workload.MaxKeys, m.zipf, m.rate, m.policy.Rate, m.policy.Burst, m.duration, m.interval, m.timeout, m.warmup, m.workers, m.history, m.drain))
	}
	if c := o.many.client; c.nodes < 1 || c.nodes > keyload.MaxNodes || c.keys < 1 || c.keys > workload.MaxKeys || c.zipf < 0 || c.rate <= 0 || c.policy.Rate < 1 || c.policy.Burst < 1 {
		fatal(fmt.Errorf("per-client workloads: -client-nodes %d (1 to %d), -client-keys %d (1 to %d), -client-rate %v, -client-key-rate %d and -client-key-burst %d must be positive, -client-zipf %v not negative",
			c.nodes, keyload.MaxNodes, c.keys, workload.MaxKeys, c.rate, c.policy.Rate, c.policy.Burst, c.zipf))
	}
	if h, i := o.many.hot, o.many.idle; h.nodes < 1 || h.nodes > keyload.MaxNodes || h.policy.Rate < 1 || h.policy.Burst < 1 || !(h.over > 0) ||
		i.nodes < 1 || i.nodes > keyload.MaxNodes || i.burst <= 0 || i.rest <= time.Second {
		fatal(fmt.Errorf("-hot-nodes %d and -idle-nodes %d (1 to %d), -hot-rate %d, -hot-burst %d, -hot-over %v and -idle-burst %v must be positive, -idle-rest %v above 1s",
			h.nodes, i.nodes, keyload.MaxNodes, h.policy.Rate, h.policy.Burst, h.over, i.burst, i.rest))
	}
	if o.nodes > keyload.MaxNodes {
		fatal(fmt.Errorf("-nodes %d: at most %d", o.nodes, keyload.MaxNodes))
	}
	if o.many.only, err = parseWorkloads(*workloads); err != nil {
		fatal(err)
	}
	if o.keysOnly && len(o.many.only) == 0 {
		fatal(errors.New("-keys-only with no -keys-workloads: nothing to measure"))
	}
	if err := run(o); err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "compare:", err)
	os.Exit(1)
}

func run(o options) (err error) {
	began := time.Now()
	srv, err := redisproc.Start()
	if err != nil {
		return err
	}
	// Stop the server whatever happens: on return, and on SIGINT/SIGTERM.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sigs
		_ = srv.Close()
		fmt.Fprintf(os.Stderr, "compare: %v: stopped redis-server\n", s)
		os.Exit(130)
	}()
	defer func() {
		signal.Stop(sigs)
		err = errors.Join(err, srv.Close())
	}()

	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()

	env := envInfo(ctx, admin)
	logf("redis-server %s on %s (pid %d); %s", env.Redis, srv.Addr(), srv.Pid(), env.Machine)

	var cs []contender.Contender
	var idx []int
	for i, c := range contender.All() {
		if o.only.MatchString(c.Name) {
			cs = append(cs, c)
			idx = append(idx, i)
		}
	}
	var results []*result
	var clock *measure.ParallelResult
	var many []*keysResult
	var floor *keyload.Result
	if !o.shapes.only {
		if len(cs) == 0 {
			return errors.New("no contender matches -only")
		}
		if !o.keysOnly {
			clock = measureClock(o)
			if results, err = measureAll(ctx, o, admin, srv.Addr(), cs, idx); err != nil {
				return err
			}
		}
		if o.many.keys > 0 {
			if floor, err = measureFloor(ctx, o); err != nil {
				return err
			}
			if many, err = measureKeys(ctx, o, admin, srv.Addr(), cs); err != nil {
				return err
			}
		}
	}
	var shaped []*shapeResult
	if o.shapes.on && !o.keysOnly {
		if err := admin.FlushAll(ctx).Err(); err != nil { // the private server only
			return err
		}
		if shaped, err = measureShapes(ctx, o, srv.Addr()); err != nil {
			return err
		}
	}
	env.Took = time.Since(began).Round(time.Second)
	env.LoadEnd = loadAvg()

	rep := report{opts: o, env: env, clock: clock, results: results, many: many, floor: floor, shapes: shaped}
	var w io.Writer = os.Stdout
	if o.out != "" {
		f, err := os.Create(o.out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = io.MultiWriter(os.Stdout, f)
	}
	if o.plot != "" && !o.keysOnly && !o.shapes.only {
		if err := drawPlot(o.plot, results, o); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		rep.plot = o.plot
		if o.out != "" {
			// The report links the plot relative to where the report is.
			if rel, err := filepath.Rel(filepath.Dir(o.out), o.plot); err == nil {
				rep.plot = filepath.ToSlash(rel)
			}
		}
		logf("plot written to %s", o.plot)
	}
	if err := rep.write(w); err != nil {
		return err
	}
	if o.out != "" {
		logf("report written to %s", o.out)
	}
	logf("whole run took %v", time.Since(began).Round(time.Second))
	return nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "compare: "+format+"\n", args...)
}

type environment struct {
	Redis, Machine, Go string
	Date, Commit       string
	Took               time.Duration
	LoadStart, LoadEnd string // /proc/loadavg: other work on the machine
}

// loadAvg is the load average over 1, 5 and 15 minutes, as uptime prints
// it, or "?".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], ", ")
}

func envInfo(ctx context.Context, admin *redis.Client) environment {
	return environment{
		Redis:     redisVersion(ctx, admin),
		Machine:   fmt.Sprintf("%s, %d CPUs, GOMAXPROCS %d, %s/%s", cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH),
		Go:        runtime.Version(),
		Date:      time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		Commit:    measure.Commit(),
		LoadStart: loadAvg(),
	}
}

// redisVersion is the server's redis_version from INFO server, or "unknown".
func redisVersion(ctx context.Context, c *redis.Client) string {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "unknown"
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range regexp.MustCompile(`(?m)^model name\s*:\s*(.+)$`).FindAllStringSubmatch(string(b), 1) {
		return line[1]
	}
	return "unknown CPU"
}
