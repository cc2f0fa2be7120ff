// Package workload measures what a fleet of limiter nodes costs Redis under
// many keys: real hybrid.Limiter nodes, each with its own Redis client, are
// offered a total rate of requests whose keys are drawn from a Zipf
// distribution (a few hot clients, a long tail of cold ones, as per-client
// limits see), and the run reports the decisions made and admitted, Redis
// CPU and Redis commands per decision (from INFO cpu and INFO commandstats
// before and after), and the reconciliation rounds' durations.
//
// The Redis is the caller's: a private redis-server (internal/redistest in
// tests, internal/redisproc in the benchmarks and the command line). Its
// counters are read, never reset, so nothing else should use it during a
// run. The defaults are those of workload W1 (docs/benchmarks.md): 4 nodes,
// 100,000 keys at Zipf s = 1.1, 20,000 decisions per second in total,
// 10/s burst 10 per key, SyncInterval 20 ms.
package workload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

// Defaults for Config's zero fields.
const (
	DefaultNodes    = 4
	DefaultKeys     = 100_000
	DefaultRate     = 20_000
	DefaultDuration = 10 * time.Second
	DefaultWorkers  = 1024
	DefaultTick     = 2 * time.Millisecond
)

// DefaultLimit is the per-key limit of a zero Config: 10/s, burst 10, a
// per-user limit.
var DefaultLimit = hybrid.PerSecond(10).WithBurst(10)

// Load is the traffic a run offers: a total rate of requests, spread evenly
// over the nodes, each request's key drawn from a Zipf distribution. The
// zero value means W1's traffic.
type Load struct {
	// Keys is the number of distinct keys requests are drawn from, at most
	// MaxKeys. Zero means 100,000.
	Keys int
	// Zipf is the skew of the draw: the key of rank k (from 1) is asked for
	// in proportion to 1/k^Zipf. Zero is a uniform draw (every key alike);
	// 1.1 is W1's. Negative is an error.
	Zipf float64
	// Rate is the decisions per second offered to the whole fleet, spread
	// evenly over the nodes, each key wherever it lands (a load balancer
	// that knows nothing of keys). Zero means 20,000.
	Rate float64
	// Workers is how many goroutines send each node its requests, so that
	// requests keep arriving at the rate while some wait on Redis (Sync
	// mode; Async requests too heavy for the node's share). Zero means 1,024.
	Workers int
	// Tick is how often a worker catches up with its pace. Zero means 2 ms.
	Tick time.Duration
	// Seed seeds the draws, so that runs are repeatable in what they ask.
	Seed uint64
}

// withDefaults checks l and fills its zero fields.
func (l Load) withDefaults() (Load, error) {
	switch {
	case l.Keys < 0 || l.Workers < 0:
		return l, fmt.Errorf("workload: negative keys %d or workers %d", l.Keys, l.Workers)
	case l.Rate < 0 || math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0):
		return l, fmt.Errorf("workload: rate %v: want a positive number of decisions per second", l.Rate)
	case l.Tick < 0:
		return l, fmt.Errorf("workload: negative tick %v", l.Tick)
	}
	if l.Keys == 0 {
		l.Keys = DefaultKeys
	}
	if l.Rate == 0 {
		l.Rate = DefaultRate
	}
	if l.Workers == 0 {
		l.Workers = DefaultWorkers
	}
	if l.Tick == 0 {
		l.Tick = DefaultTick
	}
	return l, nil
}

// Config describes one run of hybrid.Limiter nodes. The zero value is not
// usable: Client and Admin are required; every other zero field means its
// default.
type Config struct {
	// Load is the traffic offered.
	Load
	// Nodes is the number of limiter nodes, each with its own client. Zero
	// means 4.
	Nodes int
	// Limit is every key's limit. A zero Limit means 10/s burst 10.
	Limit hybrid.Limit
	// Mode and Interval are the nodes' hybrid.Config Mode and SyncInterval
	// (a zero Interval is hybrid's default, 20 ms).
	Mode     hybrid.Mode
	Interval time.Duration
	// Warmup runs the load before the measured part, so that the measure is
	// of a fleet that holds its keys already. Zero means none.
	Warmup time.Duration
	// Duration is the measured part. Zero means 10 s.
	Duration time.Duration
	// Client returns a new client for one node; the run closes it. Required.
	Client func() redis.UniversalClient
	// Admin reads Redis's counters (INFO). Required; the run leaves it open.
	Admin redis.UniversalClient
	// Prefix is the nodes' hybrid.Config Prefix: runs that share a Redis
	// keep apart by it. Zero means hybrid's default.
	Prefix string
	// Configure, if set, adjusts node i's configuration before it starts
	// (MaxKeys, BreakerOpenFor...). It may set OnRound: the run's own
	// round recording wraps it.
	Configure func(i int, c *hybrid.Config)
	// Logger receives the nodes' logs. Nil discards them.
	Logger *slog.Logger
}

// withDefaults checks c and fills its zero fields.
func (c Config) withDefaults() (Config, error) {
	var err error
	if c.Load, err = c.Load.withDefaults(); err != nil {
		return c, err
	}
	switch {
	case c.Client == nil || c.Admin == nil:
		return c, errors.New("workload: Config.Client and Config.Admin are required")
	case c.Nodes < 0:
		return c, fmt.Errorf("workload: negative nodes %d", c.Nodes)
	case c.Warmup < 0 || c.Duration < 0 || c.Interval < 0:
		return c, fmt.Errorf("workload: negative duration (warmup %v, duration %v, interval %v)", c.Warmup, c.Duration, c.Interval)
	}
	if c.Nodes == 0 {
		c.Nodes = DefaultNodes
	}
	if c.Limit == (hybrid.Limit{}) {
		c.Limit = DefaultLimit
	}
	if err := c.Limit.Validate(); err != nil {
		return c, fmt.Errorf("workload: %w", err)
	}
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c, nil
}

// Result is what one run measured, over its measured part (after Warmup).
type Result struct {
	// Config is the run's configuration, defaults filled in.
	Config Config
	// Decisions, Admitted and Errors count the calls of the measured part;
	// Sources counts them by hybrid.Source (Local, Remote, Degraded).
	Decisions, Admitted, Errors int64
	Sources                     [3]int64
	FirstError                  error
	// Shed counts requests owed but not sent: every worker of their node
	// was waiting (Totals.Shed).
	Shed int64
	// Elapsed is the measured part's length.
	Elapsed time.Duration
	// Latency holds every decision's latency over the measured part.
	Latency Histogram
	// Redis is what Redis counted over the measured part.
	Redis RedisCost
	// Rounds are the reconciliation rounds of every node over the measured
	// part.
	Rounds Rounds
	// Reconcile sums the nodes' reconciler counters over the measured part.
	Reconcile ReconcileCounts
	// Close is what closing the nodes (each reports what it had not) cost
	// Redis, after the measured part.
	Close RedisCost
	// CloseTook is how long closing the nodes took.
	CloseTook time.Duration
	// RedisMemory is Redis's used_memory after the measured part, bytes.
	RedisMemory int64
}

// RedisCost is what Redis counted over a stretch of time.
type RedisCost struct {
	// CPU is Redis's user plus system CPU time (INFO cpu).
	CPU time.Duration
	// Calls counts every command Redis ran, those a script ran included
	// (INFO commandstats), the harness's own INFO left out; Scripts the
	// script calls among them (EVALSHA, EVAL).
	Calls, Scripts int64
	// ByCommand holds Calls by command name.
	ByCommand map[string]int64
}

// Rounds summarises reconciliation rounds.
type Rounds struct {
	Count, Failed int
	// Keys is the keys the rounds reported, summed.
	Keys int64
	// P50, P99 and Max are of the rounds' durations.
	P50, P99, Max time.Duration
}

// ReconcileCounts are the nodes' reconciler counters, summed over the nodes.
type ReconcileCounts struct {
	Reports, Claims, Escalations, Deferred, LostSpend uint64
}

// Rate is the decisions per second achieved over the measured part.
func (r *Result) Rate() float64 { return float64(r.Decisions) / r.Elapsed.Seconds() }

// CPUPerDecision is Redis CPU time divided by the decisions.
func (r *Result) CPUPerDecision() time.Duration {
	if r.Decisions == 0 {
		return 0
	}
	return time.Duration(float64(r.Redis.CPU) / float64(r.Decisions))
}

// CommandsPerDecision is Redis commands (those inside scripts included)
// divided by the decisions.
func (r *Result) CommandsPerDecision() float64 {
	if r.Decisions == 0 {
		return 0
	}
	return float64(r.Redis.Calls) / float64(r.Decisions)
}

// ScriptsPerDecision is script calls divided by the decisions.
func (r *Result) ScriptsPerDecision() float64 {
	if r.Decisions == 0 {
		return 0
	}
	return float64(r.Redis.Scripts) / float64(r.Decisions)
}

// CPUShare is Redis CPU over the measured part, in fractions of one core.
func (r *Result) CPUShare() float64 { return r.Redis.CPU.Seconds() / r.Elapsed.Seconds() }

// String is one line: mode, rate, Redis CPU and commands per decision.
func (r *Result) String() string {
	return fmt.Sprintf("%v: %d decisions (%.0f/s, %d shed), %.1f%% admitted, p50 %v p99 %v; Redis %.2f µs CPU and %.3f commands per decision (%.1f%% of a core); rounds p50 %v p99 %v max %v",
		modeLabel(r.Config), r.Decisions, r.Rate(), r.Shed, 100*float64(r.Admitted)/float64(max(r.Decisions, 1)), r.Latency.Quantile(0.5), r.Latency.Quantile(0.99),
		float64(r.CPUPerDecision())/float64(time.Microsecond), r.CommandsPerDecision(), 100*r.CPUShare(),
		r.Rounds.P50, r.Rounds.P99, r.Rounds.Max)
}

// modeLabel names c's mode, with the interval for Async.
func modeLabel(c Config) string {
	if c.Mode == hybrid.Async {
		iv := c.Interval
		if iv == 0 {
			iv = hybrid.DefaultSyncInterval
		}
		return "async " + iv.String()
	}
	return c.Mode.String()
}

// Run starts cfg.Nodes limiters, offers them the load for cfg.Warmup and
// then cfg.Duration, measuring the second part, and closes them (measuring
// that too). It returns early, with an error, if ctx ends.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	keys, err := NewKeySet(cfg.Keys, cfg.Zipf)
	if err != nil {
		return nil, err
	}
	rec := &roundRecorder{}
	f, err := startFleet(cfg, rec)
	if err != nil {
		return nil, err
	}
	closed := false
	defer func() {
		if !closed {
			f.close(context.Background())
		}
	}()
	f.waitForFleet(ctx, 5*time.Second)
	allows := f.allows(cfg.Limit)

	if cfg.Warmup > 0 {
		cfg.Load.Seed ^= 0x5eed
		Drive(ctx, allows, keys, cfg.Load, cfg.Warmup)
		cfg.Load.Seed ^= 0x5eed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res := &Result{Config: cfg}
	stats0 := f.stats()
	f.resetSources()
	before, err := ReadRedis(ctx, cfg.Admin)
	if err != nil {
		return nil, err
	}
	rec.start()
	tot := Drive(ctx, allows, keys, cfg.Load, cfg.Duration)
	res.Rounds = rec.stop()
	after, err := ReadRedis(ctx, cfg.Admin)
	if err != nil {
		return nil, err
	}
	res.Redis = after.Sub(before)
	res.RedisMemory = after.Memory
	res.Decisions, res.Admitted, res.Errors, res.FirstError, res.Elapsed = tot.Decisions, tot.Admitted, tot.Errors, tot.FirstError, tot.Elapsed
	res.Latency, res.Shed = tot.Latency, tot.Shed
	res.Sources = f.sources()
	res.Reconcile = f.stats().sub(stats0)

	closeStart := time.Now()
	closed = true
	f.close(ctx)
	res.CloseTook = time.Since(closeStart)
	final, err := ReadRedis(ctx, cfg.Admin)
	if err != nil {
		return nil, err
	}
	res.Close = final.Sub(after)
	return res, ctx.Err()
}

// fleet is the run's nodes and their clients.
type fleet struct {
	nodes   []*hybrid.Limiter
	clients []redis.UniversalClient
	srcs    [][3]atomic.Int64 // decisions by source, per node
}

func startFleet(cfg Config, rec *roundRecorder) (*fleet, error) {
	f := &fleet{srcs: make([][3]atomic.Int64, cfg.Nodes)}
	for i := range cfg.Nodes {
		c := cfg.Client()
		hc := hybrid.Config{Redis: c, Prefix: cfg.Prefix, Mode: cfg.Mode, SyncInterval: cfg.Interval,
			Node: fmt.Sprintf("w%d", i+1), Logger: cfg.Logger}
		if cfg.Configure != nil {
			cfg.Configure(i, &hc)
		}
		user := hc.OnRound
		hc.OnRound = func(info hybrid.RoundInfo) {
			rec.record(info)
			if user != nil {
				user(info)
			}
		}
		l, err := hybrid.New(hc)
		if err != nil {
			_ = c.Close()
			f.close(context.Background())
			return nil, fmt.Errorf("workload: node %d: %w", i+1, err)
		}
		f.nodes = append(f.nodes, l)
		f.clients = append(f.clients, c)
	}
	return f, nil
}

// allows returns each node's decision under lim, counting sources.
func (f *fleet) allows(lim hybrid.Limit) []AllowFunc {
	out := make([]AllowFunc, len(f.nodes))
	for i, l := range f.nodes {
		src := &f.srcs[i]
		out[i] = func(ctx context.Context, key string) (bool, error) {
			d, err := l.Allow(ctx, key, lim)
			if err == nil && int(d.Source) < len(src) {
				src[d.Source].Add(1)
			}
			return d.Allowed, err
		}
	}
	return out
}

func (f *fleet) resetSources() {
	for i := range f.srcs {
		for s := range f.srcs[i] {
			f.srcs[i][s].Store(0)
		}
	}
}

func (f *fleet) sources() [3]int64 {
	var out [3]int64
	for i := range f.srcs {
		for s := range f.srcs[i] {
			out[s] += f.srcs[i][s].Load()
		}
	}
	return out
}

// waitForFleet waits, at most d, until every node has seen the whole fleet
// in Redis, so that each starts new keys at its even split of the fleet.
func (f *fleet) waitForFleet(ctx context.Context, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		all := true
		for _, l := range f.nodes {
			if l.Stats().Reconcile.Nodes < len(f.nodes) {
				all = false
			}
		}
		if all {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (f *fleet) close(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for _, l := range f.nodes {
		wg.Go(func() { _ = l.Close(ctx) })
	}
	wg.Wait()
	for _, c := range f.clients {
		_ = c.Close()
	}
}

func (f *fleet) stats() ReconcileCounts {
	var s ReconcileCounts
	for _, l := range f.nodes {
		r := l.Stats().Reconcile
		s.Reports += r.KeysSent
		s.Claims += r.Shares.Calls
		s.Escalations += r.Shares.Asks
		s.Deferred += r.Deferred
		s.LostSpend += r.LostSpend
	}
	return s
}

func (s ReconcileCounts) sub(o ReconcileCounts) ReconcileCounts {
	return ReconcileCounts{Reports: s.Reports - o.Reports, Claims: s.Claims - o.Claims, Escalations: s.Escalations - o.Escalations,
		Deferred: s.Deferred - o.Deferred, LostSpend: s.LostSpend - o.LostSpend}
}

// AllowFunc decides one request for key on one node: whether it was
// admitted. An error counts as a denial, and is counted.
type AllowFunc func(ctx context.Context, key string) (bool, error)

// KeySet is the keys a load draws from, by rank, and the draw. It is
// read-only once made and safe for concurrent use.
type KeySet struct {
	names []string
	zipf  *Zipf
}

// NewKeySet returns n keys named "user:1" to "user:n", drawn with Zipf
// exponent s ("user:1" the most often).
func NewKeySet(n int, s float64) (*KeySet, error) {
	z, err := NewZipf(n, s)
	if err != nil {
		return nil, err
	}
	names := make([]string, n)
	for k := range names {
		names[k] = "user:" + strconv.Itoa(k+1)
	}
	return &KeySet{names: names, zipf: z}, nil
}

// Totals are what a Drive counted.
type Totals struct {
	Decisions, Admitted, Errors int64
	FirstError                  error
	// Elapsed is how long the load ran.
	Elapsed time.Duration
	// Shed counts the requests the load owed that no worker was free to
	// send: the limiter kept every worker waiting.
	Shed int64
	// Latency holds every decision's latency (time.Now around the call).
	Latency Histogram
}

// Drive offers load to nodes for d and returns what it counted. The load
// is open: each node has a pacer that, every load.Tick, draws the keys of
// the requests its part of load.Rate owes (from keys, with a random source
// seeded by load.Seed) and hands them to the node's load.Workers workers,
// whether or not earlier requests have been answered, as a service's
// clients do. A request no worker is free to take is not sent and is
// counted in Totals.Shed: give a limiter that waits on Redis enough
// workers. Drive returns early if ctx ends.
func Drive(ctx context.Context, nodes []AllowFunc, keys *KeySet, load Load, d time.Duration) Totals {
	load, err := load.withDefaults()
	if err != nil || len(nodes) == 0 || d <= 0 {
		if err == nil {
			err = fmt.Errorf("workload: drive %d nodes for %v: want nodes and a positive duration", len(nodes), d)
		}
		return Totals{Errors: 1, FirstError: err}
	}
	var mu sync.Mutex
	tot := &Totals{}
	merge := func(t *Totals) {
		mu.Lock()
		defer mu.Unlock()
		tot.Decisions += t.Decisions
		tot.Admitted += t.Admitted
		tot.Errors += t.Errors
		tot.Shed += t.Shed
		tot.Latency.Merge(&t.Latency)
		if tot.FirstError == nil {
			tot.FirstError = t.FirstError
		}
	}
	perNode := load.Rate / float64(len(nodes))
	var wg sync.WaitGroup
	start := time.Now()
	for n, allow := range nodes {
		work := make(chan string, load.Workers)
		var workers sync.WaitGroup
		for range load.Workers {
			workers.Go(func() {
				t := &Totals{}
				defer merge(t)
				for key := range work {
					t0 := time.Now()
					ok, err := allow(ctx, key)
					t.Latency.Record(time.Since(t0))
					t.Decisions++
					switch {
					case err != nil:
						t.Errors++
						if t.FirstError == nil {
							t.FirstError = err
						}
					case ok:
						t.Admitted++
					}
				}
			})
		}
		wg.Go(func() {
			defer workers.Wait()
			defer close(work)
			r := rand.New(rand.NewPCG(load.Seed, uint64(n+1)))
			tick := time.NewTicker(load.Tick)
			defer tick.Stop()
			var shed int64
			defer func() { merge(&Totals{Shed: shed}) }()
			owed, last := 0.0, time.Duration(0)
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				// A tick that comes after the end still sends what was
				// owed up to it (the pacer woke late: a loaded machine).
				at := min(time.Since(start), d)
				owed += perNode * (at - last).Seconds()
				last = at
				for ; owed >= 1; owed-- {
					key := keys.names[keys.zipf.Draw(r)]
					select {
					case work <- key:
					default:
						shed++ // every worker busy: not sent
					}
				}
				if at >= d {
					return
				}
			}
		})
	}
	wg.Wait()
	tot.Elapsed = time.Since(start)
	return *tot
}

// roundRecorder keeps the durations of the rounds of the measured part.
type roundRecorder struct {
	on     atomic.Bool
	mu     sync.Mutex
	durs   []time.Duration
	keys   int64
	failed int
}

func (r *roundRecorder) record(info hybrid.RoundInfo) {
	if !r.on.Load() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.durs = append(r.durs, info.Duration)
	r.keys += int64(info.Keys)
	if info.Err != nil {
		r.failed++
	}
}

func (r *roundRecorder) start() {
	r.mu.Lock()
	r.durs, r.keys, r.failed = r.durs[:0], 0, 0
	r.mu.Unlock()
	r.on.Store(true)
}

func (r *roundRecorder) stop() Rounds {
	r.on.Store(false)
	r.mu.Lock()
	defer r.mu.Unlock()
	return summarise(r.durs, r.keys, r.failed)
}

// summarise makes Rounds of durations.
func summarise(durs []time.Duration, keys int64, failed int) Rounds {
	out := Rounds{Count: len(durs), Failed: failed, Keys: keys}
	if len(durs) == 0 {
		return out
	}
	s := slices.Clone(durs)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(int(p*float64(len(s))), len(s)-1)] }
	out.P50, out.P99, out.Max = q(0.5), q(0.99), s[len(s)-1]
	return out
}

// RedisCounters are Redis's cumulative counters at one moment.
type RedisCounters struct {
	CPU            time.Duration
	Calls, Scripts int64
	ByCommand      map[string]int64
	Memory         int64 // used_memory, bytes
}

// Sub returns what Redis counted between o and c.
func (c RedisCounters) Sub(o RedisCounters) RedisCost {
	out := RedisCost{CPU: c.CPU - o.CPU, Calls: c.Calls - o.Calls, Scripts: c.Scripts - o.Scripts, ByCommand: map[string]int64{}}
	for k, v := range c.ByCommand {
		if d := v - o.ByCommand[k]; d != 0 {
			out.ByCommand[k] = d
		}
	}
	return out
}

// ReadRedis reads Redis's CPU, command and memory counters (INFO cpu,
// commandstats, memory).
func ReadRedis(ctx context.Context, c redis.UniversalClient) (RedisCounters, error) {
	info, err := c.Info(ctx, "cpu", "commandstats", "memory").Result()
	if err != nil {
		return RedisCounters{}, fmt.Errorf("workload: reading INFO: %w", err)
	}
	return ParseInfo(info), nil
}

// ignored are the commands a harness sends to read the counters.
var ignored = map[string]bool{"info": true, "config|resetstat": true, "config": true}

// ParseInfo reads the counters from the text of INFO. A counter INFO did not
// carry is zero.
func ParseInfo(info string) RedisCounters {
	out := RedisCounters{ByCommand: map[string]int64{}}
	cpu := 0.0
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		name, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case name == "used_cpu_sys" || name == "used_cpu_user":
			v, _ := strconv.ParseFloat(val, 64)
			cpu += v
		case name == "used_memory":
			out.Memory, _ = strconv.ParseInt(val, 10, 64)
		case strings.HasPrefix(name, "cmdstat_"):
			cmd := strings.TrimPrefix(name, "cmdstat_")
			if ignored[cmd] {
				continue
			}
			for _, kv := range strings.Split(val, ",") {
				if v, ok := strings.CutPrefix(kv, "calls="); ok {
					n, _ := strconv.ParseInt(v, 10, 64)
					out.ByCommand[cmd] += n
					out.Calls += n
					if cmd == "evalsha" || cmd == "eval" || cmd == "evalsha_ro" || cmd == "eval_ro" || cmd == "fcall" {
						out.Scripts += n
					}
				}
			}
		}
	}
	out.CPU = time.Duration(cpu * float64(time.Second))
	return out
}
