// Command rlsbench measures hybridlimit rls and envoyproxy/ratelimit side
// by side: the same configuration, the same private redis-server, the same
// gRPC load from several client goroutines (one stream each per
// instance), 1 to 4 instances of each service:
//
//	make bench-rls
//
// It measures, for both services in one run:
//
//   - ShouldRateLimit p50, p99 and throughput, offered 1,000 requests/s and
//     up, doubling, then as fast as the clients go (saturation);
//
//   - Redis commands (and Redis CPU) per request;
//
//   - admitted ÷ limit across 4 instances, one key offered twice its
//     limit, with the Redis calls per instance per sync interval;
//
//   - Redis killed for 10 s under load: errors returned, p99 during the
//     outage, admitted ÷ limit, and how long after Redis returns each
//     service is back to normal.
//
//   - new keys on sticky streams: 2 and 4 instances, each carrying a key
//     of its own (100/s, then 10/s) from the client goroutines pinned to it
//     (as each Envoy holds one connection to a rate limit service host),
//     admitted ÷ limit a second;
//
//   - a fleet of 2 and 4 replicas and a new key of 100/s: offered exactly
//     its limit, sticky (all its calls on one replica) and round-robin,
//     the calls refused within the limit and those past Envoy's 20 ms
//     timeout; then every replica bursting at once, the most admitted in a
//     second beside the Async bound;
//
//   - a flood of distinct 4 KB descriptor values against one instance: its
//     peak memory, and what it held and evicted;
//
//   - 1, 2 and 4 replicas at rest, fresh and after a load: CPU a second,
//     memory, Redis commands a second, each a replica's.
//
// -cases picks the runs (all by default). It writes a Markdown report
// (-out) and a plot (-plot, when the latency and outage runs ran). Both
// services are child processes started from bench/.bin (make rls-peer
// builds them), configured by the same environment variables:
// envoyproxy/ratelimit's.
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
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/bench/measure"
	"github.com/hybridlimit/hybridlimit/bench/rlsrun"
	"github.com/hybridlimit/hybridlimit/internal/redisproc"
)

const benchDomain = "bench"

// benchConfig is the configuration both services load: a limit per client
// that the latency runs never reach, one shared key, the sticky runs' new
// keys, and the flood's values.
func benchConfig(hotLimit int, stickyLimits []int, replicaLimit int) string {
	var sticky strings.Builder
	for _, l := range stickyLimits {
		fmt.Fprintf(&sticky, "  - key: sticky-%d\n    rate_limit: {unit: second, requests_per_unit: %d}\n", l, l)
	}
	return fmt.Sprintf(`domain: bench
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 1000000}
  - key: hot
    rate_limit: {unit: second, requests_per_unit: %d}
%s  - key: replica
    rate_limit: {unit: second, requests_per_unit: %d}
  - key: flood
    rate_limit: {unit: minute, requests_per_unit: 100}
`, hotLimit, sticky.String(), replicaLimit)
}

// allCases are the runs -cases may name, in the order they run.
var allCases = []string{"latency", "accuracy", "outage", "sticky", "replicas", "flood", "idle"}

type options struct {
	bin                   string
	rates                 []float64
	instances             []int
	step, warm            time.Duration
	goroutines            int
	timeout               time.Duration
	hotLimit              int
	fleet                 int
	accuracy              time.Duration
	outageRate            float64
	before, outage, after time.Duration
	syncInterval          time.Duration
	kinds                 []rlsrun.Kind
	out, plot             string
	cases                 map[string]bool
	stickyInstances       []int
	stickyLimits          []int
	stickyFor             time.Duration
	floodValues           int
	floodBytes            int
	idleFor               time.Duration
	idleInstances         []int
	replicaInstances      []int
	replicaLimit          int
	replicaFor            time.Duration
}

func main() {
	var o options
	var rates, instances, only, cases, stickyInstances, stickyLimits, idleInstances, replicaInstances string
	flag.StringVar(&o.bin, "bin", ".bin", "the directory holding hybridlimit and service_cmd (make rls-peer)")
	flag.StringVar(&rates, "rates", "1000,2000,4000,8000,16000", "offered loads of the latency runs, requests/s; then one run as fast as the clients go")
	flag.StringVar(&instances, "instances", "1,2,4", "instance counts of the latency runs")
	flag.DurationVar(&o.step, "step", 3*time.Second, "duration of each latency run")
	flag.DurationVar(&o.warm, "warm", time.Second, "warm-up before the latency runs of each instance count")
	flag.IntVar(&o.goroutines, "goroutines", 16, "client goroutines, each with a gRPC stream to every instance")
	flag.DurationVar(&o.timeout, "timeout", 2*time.Second, "client timeout of each call")
	flag.IntVar(&o.hotLimit, "limit", 500, "the shared key's limit, requests per second")
	flag.IntVar(&o.fleet, "fleet", 4, "instances of the accuracy and outage runs")
	flag.DurationVar(&o.accuracy, "accuracy", 10*time.Second, "duration of the accuracy run (whole seconds)")
	flag.Float64Var(&o.outageRate, "outage-rate", 1000, "offered load of the outage run, requests/s, all on the shared key")
	flag.DurationVar(&o.before, "before", 5*time.Second, "load before Redis is killed")
	flag.DurationVar(&o.outage, "outage", 10*time.Second, "how long Redis stays dead")
	flag.DurationVar(&o.after, "after", 15*time.Second, "load after Redis returns")
	flag.DurationVar(&o.syncInterval, "sync-interval", 20*time.Millisecond, "hybridlimit's sync interval (HYBRIDLIMIT_SYNC_INTERVAL)")
	flag.StringVar(&only, "only", "", "run one service only: ours or theirs")
	flag.StringVar(&cases, "cases", strings.Join(allCases, ","), "the runs to make, comma-separated: "+strings.Join(allCases, ", "))
	flag.StringVar(&stickyInstances, "sticky-instances", "2,4", "instance counts of the sticky runs")
	flag.StringVar(&stickyLimits, "sticky-limits", "100,10", "the sticky keys' limits, requests per second (each offered twice its limit), one run each")
	flag.DurationVar(&o.stickyFor, "sticky-for", 10*time.Second, "duration of each sticky run (whole seconds)")
	flag.IntVar(&o.floodValues, "flood-values", 200_000, "distinct descriptor values of the flood")
	flag.IntVar(&o.floodBytes, "flood-bytes", 4096, "bytes of each flood value")
	flag.DurationVar(&o.idleFor, "idle-for", 20*time.Second, "each window of the idle runs")
	flag.StringVar(&idleInstances, "idle-instances", "1,2,4", "replica counts of the idle runs")
	flag.StringVar(&replicaInstances, "replica-instances", "2,4", "replica counts of the replica runs")
	flag.IntVar(&o.replicaLimit, "replica-limit", 100, "the replica runs' new key's limit, requests per second")
	flag.DurationVar(&o.replicaFor, "replica-for", 10*time.Second, "duration of each replica run (whole seconds)")
	flag.StringVar(&o.out, "out", "rls-results.md", "write the Markdown report here too (\"\" for stdout only)")
	flag.StringVar(&o.plot, "plot", "../docs/bench-rls.png", "write the plot here (\"\" for none)")
	flag.Parse()
	var err error
	if o.rates, err = floats(rates); err == nil {
		var is []float64
		is, err = floats(instances)
		for _, n := range is {
			o.instances = append(o.instances, int(n))
		}
	}
	if err == nil {
		var is []float64
		is, err = floats(stickyInstances)
		for _, n := range is {
			o.stickyInstances = append(o.stickyInstances, int(n))
		}
	}
	if err == nil {
		o.idleInstances, err = ints(idleInstances)
	}
	if err == nil {
		o.replicaInstances, err = ints(replicaInstances)
	}
	if err == nil {
		var ls []float64
		ls, err = floats(stickyLimits)
		for _, l := range ls {
			o.stickyLimits = append(o.stickyLimits, int(l))
		}
	}
	if err == nil {
		o.cases, err = pickCases(cases)
	}
	if err != nil {
		fatal(err)
	}
	switch only {
	case "":
		o.kinds = []rlsrun.Kind{rlsrun.Theirs, rlsrun.Ours}
	case "ours":
		o.kinds = []rlsrun.Kind{rlsrun.Ours}
	case "theirs":
		o.kinds = []rlsrun.Kind{rlsrun.Theirs}
	default:
		fatal(fmt.Errorf("-only %q: want ours or theirs", only))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fatal(err)
	}
}

func floats(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("%q: want positive numbers, comma-separated", s)
		}
		out = append(out, v)
	}
	return out, nil
}

// ints parses a comma-separated list of positive whole numbers.
func ints(s string) ([]int, error) {
	fs, err := floats(s)
	var out []int
	for _, f := range fs {
		if f != float64(int(f)) {
			return nil, fmt.Errorf("%q: want whole numbers", s)
		}
		out = append(out, int(f))
	}
	return out, err
}

// pickCases parses -cases.
func pickCases(s string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, c := range strings.Split(s, ",") {
		c = strings.TrimSpace(c)
		if !slices.Contains(allCases, c) {
			return nil, fmt.Errorf("-cases: unknown run %q (want some of %s)", c, strings.Join(allCases, ", "))
		}
		out[c] = true
	}
	return out, nil
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "rlsbench:", err)
	os.Exit(1)
}

// bench is one run's shared parts.
type bench struct {
	o     options
	bins  rlsrun.Bins
	srv   *redisproc.Server
	admin *redis.Client
	root  string
	log   *os.File
}

func run(ctx context.Context, o options) error {
	needTheirs := len(o.kinds) > 1 || o.kinds[0] == rlsrun.Theirs
	bins, err := rlsrun.FindBins(o.bin, needTheirs)
	if err != nil {
		return err
	}
	srv, err := redisproc.Start("--save", "", "--appendonly", "no")
	if err != nil {
		return err
	}
	defer srv.Close()
	root, err := os.MkdirTemp("", "rlsbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	if err := rlsrun.WriteConfig(root, map[string]string{"bench.yaml": benchConfig(o.hotLimit, o.stickyLimits, o.replicaLimit)}); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(root, "services.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	b := &bench{o: o, bins: bins, srv: srv, admin: redis.NewClient(&redis.Options{Addr: srv.Addr()}), root: root, log: logf}
	defer b.admin.Close()
	redisVersion, _ := b.admin.Info(ctx, "server").Result()

	rep := &report{o: o, started: time.Now(), commit: measure.Commit(), redis: field(redisVersion, "redis_version"), cpus: runtime.NumCPU(), goVersion: runtime.Version(), loadStart: loadAverage()}
	for _, kind := range o.kinds {
		for _, n := range o.instances {
			if !o.cases["latency"] {
				break
			}
			fmt.Fprintf(os.Stderr, "latency: %v, %d instances\n", kind, n)
			rows, err := b.sweep(ctx, kind, n)
			if err != nil {
				return fmt.Errorf("%v, %d instances: %w", kind, n, err)
			}
			rep.sweep = append(rep.sweep, rows...)
		}
	}
	for _, kind := range o.kinds {
		if !o.cases["accuracy"] {
			break
		}
		fmt.Fprintf(os.Stderr, "accuracy: %v, %d instances\n", kind, o.fleet)
		acc, err := b.accuracyRun(ctx, kind)
		if err != nil {
			return fmt.Errorf("%v accuracy: %w", kind, err)
		}
		rep.accuracy = append(rep.accuracy, acc)
	}
	for _, kind := range o.kinds {
		if !o.cases["outage"] {
			break
		}
		fmt.Fprintf(os.Stderr, "outage: %v, %d instances, Redis dead for %v\n", kind, o.fleet, o.outage)
		out, err := b.outageRun(ctx, kind)
		if err != nil {
			return fmt.Errorf("%v outage: %w", kind, err)
		}
		rep.outages = append(rep.outages, out)
	}
	for _, limit := range o.stickyLimits {
		for _, kind := range o.kinds {
			for _, n := range o.stickyInstances {
				if !o.cases["sticky"] {
					break
				}
				progress("sticky: %v, %d instances, a new key of %d/s on each", kind, n, limit)
				st, err := b.stickyRun(ctx, kind, n, limit)
				if err != nil {
					return fmt.Errorf("%v sticky, %d instances: %w", kind, n, err)
				}
				rep.sticky = append(rep.sticky, st)
			}
		}
	}
	for _, n := range o.replicaInstances {
		for _, kind := range o.kinds {
			if !o.cases["replicas"] {
				break
			}
			runs, err := b.replicaRuns(ctx, kind, n)
			if err != nil {
				return fmt.Errorf("%v replicas: %w", kind, err)
			}
			rep.replicas = append(rep.replicas, runs...)
		}
	}
	for _, kind := range o.kinds {
		if !o.cases["flood"] {
			break
		}
		progress("flood: %v, %d values of %d bytes", kind, o.floodValues, o.floodBytes)
		f, err := b.floodRun(ctx, kind)
		if err != nil {
			return fmt.Errorf("%v flood: %w", kind, err)
		}
		rep.floods = append(rep.floods, f)
	}
	for _, n := range o.idleInstances {
		for _, kind := range o.kinds {
			if !o.cases["idle"] {
				break
			}
			progress("idle: %v, %d replicas, %v at rest, twice", kind, n, o.idleFor)
			x, err := b.idleRun(ctx, kind, n)
			if err != nil {
				return fmt.Errorf("%v idle, %d replicas: %w", kind, n, err)
			}
			rep.idles = append(rep.idles, x)
		}
	}
	rep.took, rep.loadEnd = time.Since(rep.started), loadAverage()
	var w io.Writer = os.Stdout
	if o.out != "" {
		f, err := os.Create(o.out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = io.MultiWriter(os.Stdout, f)
	}
	rep.write(w)
	if o.plot != "" && len(rep.sweep) > 0 && len(rep.outages) > 0 {
		if err := drawPlot(o.plot, rep); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
	}
	return nil
}

func field(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return "?"
}

// start launches n fresh instances of kind on an empty Redis.
func (b *bench) start(ctx context.Context, kind rlsrun.Kind, n int) ([]*rlsrun.Instance, error) {
	if err := b.admin.FlushAll(ctx).Err(); err != nil {
		return nil, err
	}
	env := []string{"HYBRIDLIMIT_SYNC_INTERVAL=" + b.o.syncInterval.String()}
	var ins []*rlsrun.Instance
	for range n {
		in, err := rlsrun.Start(ctx, kind, b.bins, benchDomain, rlsrun.Options{Root: b.root, Redis: b.srv.Addr(), Env: env, Log: b.log})
		if err != nil {
			stopAll(ins)
			return nil, err
		}
		ins = append(ins, in)
	}
	return ins, nil
}

func stopAll(ins []*rlsrun.Instance) error {
	var errs []error
	for _, in := range ins {
		errs = append(errs, in.Stop())
	}
	return errors.Join(errs...)
}

func addrs(ins []*rlsrun.Instance) []string {
	var a []string
	for _, in := range ins {
		a = append(a, in.GRPC)
	}
	return a
}

// sweepRow is one latency run.
type sweepRow struct {
	kind           rlsrun.Kind
	instances      int
	offered        float64 // 0: as fast as the clients go
	st             stats
	cmdsPerReq     float64
	redisUsPerReq  float64
	redisCallsBy   map[string]int64
	saturatedAfter bool
}

func (b *bench) sweep(ctx context.Context, kind rlsrun.Kind, n int) ([]sweepRow, error) {
	ins, err := b.start(ctx, kind, n)
	if err != nil {
		return nil, err
	}
	defer stopAll(ins)
	c, err := dial(addrs(ins), b.o.goroutines)
	if err != nil {
		return nil, err
	}
	defer c.close()
	mk := perClient(1000)
	drive(ctx, c, 1000, b.o.warm, b.o.timeout, mk, nil)
	step := func(rate float64) (sweepRow, error) {
		if err := measure.ResetServerStats(ctx, b.admin); err != nil {
			return sweepRow{}, err
		}
		s := drive(ctx, c, rate, b.o.step, b.o.timeout, mk, nil)
		rs, err := measure.ReadServerStats(ctx, b.admin)
		if err != nil {
			return sweepRow{}, err
		}
		row := sweepRow{kind: kind, instances: n, offered: rate, st: summarise(s, b.o.step), redisCallsBy: rs.By}
		if len(s) > 0 {
			row.cmdsPerReq = float64(rs.Calls) / float64(len(s))
			row.redisUsPerReq = float64(rs.Usec) / float64(len(s))
		}
		fmt.Fprintf(os.Stderr, "  offered %6.0f/s: %7.0f/s p50 %s p99 %s errors %d\n", rate, row.st.perSec, ms(row.st.p50), ms(row.st.p99), row.st.errs)
		return row, nil
	}
	var rows []sweepRow
	for i, rate := range b.o.rates {
		row, err := step(rate)
		if err != nil {
			return nil, err
		}
		rows = append(rows, row)
		if row.st.perSec < 0.8*rate {
			// Saturated: higher rates would only measure the queue.
			for _, r := range b.o.rates[i+1:] {
				rows = append(rows, sweepRow{kind: kind, instances: n, offered: r, saturatedAfter: true})
			}
			break
		}
	}
	row, err := step(0) // as fast as the clients go
	if err != nil {
		return nil, err
	}
	rows = append(rows, row)
	return rows, nil
}

// accuracy is the fleet run on the shared key.
type accuracy struct {
	kind                  rlsrun.Kind
	instances             int
	seconds               int
	admitted, errs        int
	worst                 int // most admitted in one second
	callsPerInstanceTick  float64
	redisCalls            map[string]int64
	offered, limitPerSec  float64
	perSecond             []int
	callsPerReq, usPerReq float64
	roundTrip             time.Duration // hybridlimit: the mean reconciliation round
	bound                 float64       // hybridlimit: the Async bound, ÷ limit
}

// alignedStart waits until just before the next whole second, so a run's
// seconds are the services' windows.
func alignedStart(ctx context.Context) error {
	now := time.Now()
	next := now.Truncate(time.Second).Add(time.Second)
	t := time.NewTimer(time.Until(next) - 20*time.Millisecond) // drive starts 20 ms after it is called
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (b *bench) accuracyRun(ctx context.Context, kind rlsrun.Kind) (accuracy, error) {
	n := b.o.fleet
	ins, err := b.start(ctx, kind, n)
	if err != nil {
		return accuracy{}, err
	}
	defer stopAll(ins)
	c, err := dial(addrs(ins), b.o.goroutines)
	if err != nil {
		return accuracy{}, err
	}
	defer c.close()
	drive(ctx, c, 1000, b.o.warm, b.o.timeout, perClient(1000), nil) // connections and processes warm, the shared key untouched
	secs := int(b.o.accuracy / time.Second)
	rate := 2 * float64(b.o.hotLimit)
	if err := measure.ResetServerStats(ctx, b.admin); err != nil {
		return accuracy{}, err
	}
	if err := alignedStart(ctx); err != nil {
		return accuracy{}, err
	}
	s := drive(ctx, c, rate, time.Duration(secs)*time.Second, b.o.timeout, hot(), nil)
	rs, err := measure.ReadServerStats(ctx, b.admin)
	if err != nil {
		return accuracy{}, err
	}
	a := accuracy{kind: kind, instances: n, seconds: secs, offered: rate, limitPerSec: float64(b.o.hotLimit), redisCalls: rs.By, perSecond: make([]int, secs)}
	for _, x := range s {
		if x.err {
			a.errs++
			continue
		}
		if !x.over {
			a.admitted++
			if i := secondOf(x.at); i >= 0 && i < secs {
				a.perSecond[i]++
			}
		}
	}
	for _, v := range a.perSecond {
		a.worst = max(a.worst, v)
	}
	if kind == rlsrun.Ours {
		if a.roundTrip, a.bound, err = b.asyncBound(ctx, ins); err != nil {
			return accuracy{}, err
		}
	}
	ticks := float64(n) * b.o.accuracy.Seconds() / b.o.syncInterval.Seconds()
	a.callsPerInstanceTick = float64(rs.By["evalsha"]+rs.By["eval"]) / ticks
	if len(s) > 0 {
		a.callsPerReq = float64(rs.Calls) / float64(len(s))
		a.usPerReq = float64(rs.Usec) / float64(len(s))
	}
	return a, nil
}

// normalP99 is the p99 a second may have and count as normal after an
// outage (or twice the p99 before it, if more): far below a call waiting on
// a dead Redis (up to the client timeout), far above the scheduling noise
// of a shared machine.
const normalP99 = 100 * time.Millisecond

// recovery returns how long after back the seconds [from, to) turn normal
// for good: the start of the last run of normal seconds that reaches the
// end, minus back; -1 if the last second is not normal.
func recovery(from, to int, back time.Duration, normal func(i int) bool) time.Duration {
	first := -1
	for i := to - 1; i >= from; i-- {
		if !normal(i) {
			break
		}
		first = i
	}
	if first < 0 {
		return -1
	}
	return time.Duration(first)*time.Second - back
}

// outage is the run with Redis killed.
type outage struct {
	kind      rlsrun.Kind
	instances int
	samples   []sample
	before    stats
	during    stats
	after     stats
	// admitted ÷ limit, per second and over each phase
	perSecond                          []float64
	admBefore, admDuring, admAfter     float64
	recoverErrs, recoverP99, recoverAd time.Duration // after Redis returned; -1: never within the run
	seconds                            int
}

func (b *bench) outageRun(ctx context.Context, kind rlsrun.Kind) (outage, error) {
	n := b.o.fleet
	ins, err := b.start(ctx, kind, n)
	if err != nil {
		return outage{}, err
	}
	defer func() {
		_ = b.srv.Restart() // in case the run stopped while Redis was dead
		stopAll(ins)
	}()
	c, err := dial(addrs(ins), b.o.goroutines)
	if err != nil {
		return outage{}, err
	}
	defer c.close()
	drive(ctx, c, 1000, b.o.warm, b.o.timeout, perClient(1000), nil)
	if err := alignedStart(ctx); err != nil {
		return outage{}, err
	}
	total := b.o.before + b.o.outage + b.o.after
	killed := make(chan error, 1)
	var start time.Time
	s := drive(ctx, c, b.o.outageRate, total, b.o.timeout, hot(), func(t time.Time) {
		start = t
		go func() {
			time.Sleep(time.Until(start.Add(b.o.before)))
			b.srv.Kill()
			time.Sleep(time.Until(start.Add(b.o.before + b.o.outage)))
			killed <- b.srv.Restart()
		}()
	})
	if err := <-killed; err != nil {
		return outage{}, fmt.Errorf("restarting Redis: %w", err)
	}
	o := outage{kind: kind, instances: n, samples: s, seconds: int(total / time.Second)}
	o.before = summarise(window(s, 0, b.o.before), b.o.before)
	o.during = summarise(window(s, b.o.before, b.o.before+b.o.outage), b.o.outage)
	o.after = summarise(window(s, b.o.before+b.o.outage, total), b.o.after)
	lim := float64(b.o.hotLimit)
	admitted := func(from, to time.Duration) float64 {
		n := 0
		for _, x := range window(s, from, to) {
			if !x.err && !x.over {
				n++
			}
		}
		return float64(n) / (lim * (to - from).Seconds())
	}
	o.admBefore = admitted(time.Second, b.o.before) // the first second fills the window's count from zero
	o.admDuring = admitted(b.o.before, b.o.before+b.o.outage)
	o.admAfter = admitted(b.o.before+b.o.outage, total)
	for i := range o.seconds {
		o.perSecond = append(o.perSecond, admitted(time.Duration(i)*time.Second, time.Duration(i+1)*time.Second))
	}
	// Back to normal: the first second after Redis returned from which every
	// later second is normal: no error; p99 within normalP99 (or twice the
	// p99 before the outage); admitted within 20% of the limit.
	base := o.before.p99
	back := b.o.before + b.o.outage
	sec := func(i int) stats {
		from := time.Duration(i) * time.Second
		return summarise(window(s, from, from+time.Second), time.Second)
	}
	o.recoverErrs = recovery(int(back/time.Second), o.seconds, back, func(i int) bool { return sec(i).errs == 0 })
	o.recoverP99 = recovery(int(back/time.Second), o.seconds, back, func(i int) bool {
		st := sec(i)
		return st.errs == 0 && st.p99 <= max(2*base, normalP99)
	})
	o.recoverAd = recovery(int(back/time.Second), o.seconds, back, func(i int) bool { return o.perSecond[i] > 0.8 && o.perSecond[i] < 1.2 })
	return o, nil
}
