package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/bench/contender"
	"github.com/hybridlimit/hybridlimit/bench/keyload"
	"github.com/hybridlimit/hybridlimit/internal/workload"
)

// The many-keys workloads: fleets of limiter nodes offered traffic over
// many keys, laid out in advance and sent open-loop (bench/keyload), each
// contender on its own flushed Redis in turn, the same requests for each.
// For each: what Redis spends per decision (INFO cpu and commandstats
// around the measured part), the decisions' latency from their scheduled
// send time, the share answered from memory, the share of requests that
// are their key's first on their node, and what one exact limiter admits of
// the same requests.

// keysOptions are the many-keys workloads' settings.
type keysOptions struct {
	keys     int // W1's keys; 0: the workloads are skipped
	zipf     float64
	rate     float64 // decisions per second, the whole fleet
	policy   contender.Policy
	warmup   time.Duration
	duration time.Duration
	history  time.Duration // drawn, never sent: the steady-state first-request figures look back over it
	interval time.Duration // our Async contender's SyncInterval
	timeout  time.Duration // our contenders' RedisTimeout
	workers  int           // workers per node
	drain    time.Duration // how long answers are awaited after the last request is due
	only     []string      // workloads to run, by id (keys-only)
	peers    bool          // keys-only: the peers too, on W1

	client clientOptions // the per-client workloads
	hot    hotOptions
	idle   idleOptions
}

// clientOptions are the per-client workloads' settings: many keys, one
// client each, at a limit smaller than the fleet.
type clientOptions struct {
	nodes, keys int
	zipf, rate  float64
	policy      contender.Policy
}

// hotOptions are the hot key's: one key over every node.
type hotOptions struct {
	nodes  int
	policy contender.Policy
	over   float64 // offered, in multiples of the limit's rate
}

// idleOptions are the idle fleet's: W1's traffic for burst, then nothing
// for rest.
type idleOptions struct {
	nodes       int
	burst, rest time.Duration
}

// keysWorkload is one workload: a stream's spec and the key's limit.
type keysWorkload struct {
	id     string // its name in -keys-workloads
	title  string
	about  string // what it asks of a limiter
	spec   keyload.Spec
	policy contender.Policy
	// idle: send spec for idle.burst, then measure the fleet at rest.
	idle bool
}

// workloadIDs are the workloads in the order they run.
var workloadIDs = []string{"w1", "pinned", "roundrobin", "random", "hotkey", "bursts", "idle"}

// keysWorkloads are the workloads o asks for.
func keysWorkloads(o options) []keysWorkload {
	m, c := o.many, o.many.client
	w1 := keyload.Spec{Nodes: o.nodes, Keys: m.keys, Zipf: m.zipf, Rate: m.rate, Routing: keyload.Random, Seed: 1}
	perClient := func(r keyload.Routing) keyload.Spec {
		return keyload.Spec{Nodes: c.nodes, Keys: c.keys, Zipf: c.zipf, Rate: c.rate, Routing: r, Seed: 2}
	}
	bursts := w1
	bursts.Routing, bursts.Clump, bursts.Seed = keyload.Pinned, int(m.policy.Burst), 3
	hot := keyload.Spec{Nodes: m.hot.nodes, Keys: 1, Rate: m.hot.over * float64(m.hot.policy.Rate), Routing: keyload.Random, Seed: 4}
	idle := w1
	idle.Nodes, idle.Seed = m.idle.nodes, 5
	clientTitle := fmt.Sprintf("%d nodes, %s keys at Zipf %g, %s decisions/s, %s a key", c.nodes, fmtCount(int64(c.keys)), c.zipf, fmtCount(int64(c.rate)), c.policy)
	all := []keysWorkload{
		{id: "w1", spec: w1, policy: m.policy,
			title: fmt.Sprintf("W1: %d nodes, %s keys at Zipf %g, %s decisions/s, %s a key, each request to a node at random", o.nodes, fmtCount(int64(m.keys)), m.zipf, fmtCount(int64(m.rate)), m.policy),
			about: "spread demand whose share holds several requests: Redis work per key and interval, not per decision"},
		{id: "pinned", spec: perClient(keyload.Pinned), policy: c.policy,
			title: "per-client, pinned: " + clientTitle + ", each key's requests always on one node (a hash of the key)",
			about: "demand with a home: after a key's first request on its node, every decision from memory"},
		{id: "roundrobin", spec: perClient(keyload.RoundRobin), policy: c.policy,
			title: "per-client, round-robin: " + clientTitle + ", each key's successive requests on the nodes in turn",
			about: "spread demand whose share is smaller than one request (burst below the fleet): a round trip a decision is physics; Async must not cost more than Sync"},
		{id: "random", spec: perClient(keyload.Random), policy: c.policy,
			title: "per-client, random: " + clientTitle + ", each request to a node at random",
			about: "as round-robin, the node drawn at random"},
		{id: "hotkey", spec: hot, policy: m.hot.policy,
			title: fmt.Sprintf("a hot key: %d nodes, one key at %s offered %g times its rate, each request to a node at random", m.hot.nodes, m.hot.policy, m.hot.over),
			about: "one key over its limit everywhere: refused from memory until the fleet has room, at the limit on both sides"},
		{id: "bursts", spec: bursts, policy: m.policy,
			title: fmt.Sprintf("sticky bursts: W1's keys and rate, each draw a client's whole burst (%d requests at once) on its own node", m.policy.Burst),
			about: "a burst larger than a node's even split, on the node that holds the client: admitted whole, and cheaply"},
		{id: "idle", spec: idle, policy: m.policy, idle: true,
			title: fmt.Sprintf("an idle fleet: %d nodes, W1's traffic for %v, then nothing for %v", m.idle.nodes, m.idle.burst, m.idle.rest),
			about: "what a node costs Redis when nothing happens (target: at most 50 commands a second)"},
	}
	if !o.keysOnly {
		return all[:1] // bench-compare: W1, every contender
	}
	var out []keysWorkload
	for _, w := range all {
		for _, id := range m.only {
			if w.id == id {
				out = append(out, w)
			}
		}
	}
	return out
}

// keysContenders are the contenders of workload w: in bench-compare every
// one that keeps its state in Redis; in bench-keys our Async and Sync, in
// that order, and the peers on W1 with -keys-peers. Our Async runs at the
// workloads' interval.
func keysContenders(o options, w keysWorkload, cs []contender.Contender) []contender.Contender {
	var out []contender.Contender
	if o.keysOnly {
		// Async first: the column the reader compares with Sync beside it.
		cs = slices.Clone(cs)
		slices.SortStableFunc(cs, func(a, b contender.Contender) int { return cmp.Compare(b.Interval, a.Interval) })
	}
	for _, c := range cs {
		if !c.Distributed {
			continue
		}
		ours := c.Name == "hybridlimit Sync" || c.Interval != 0
		if o.keysOnly && !ours && !(o.many.peers && w.id == "w1") {
			continue
		}
		if c.Interval != 0 {
			c = contender.HybridAsync(o.many.interval)
		}
		out = append(out, c)
	}
	return out
}

// keysRun is one contender's run of one workload.
type keysRun struct {
	c      contender.Contender
	res    *keyload.Result
	acc    keyload.Accuracy
	demand [keyload.NumDemands]keyload.DemandClass // acc and the waits by the keys' demand
	redis  workload.RedisCost                      // from the measured part's start to its last answer
	window time.Duration                           // that stretch
	nodes  int
	// ours: the contender is one of our modes, whose decisions say where
	// they came from and whether they waited; asks is Async's count of
	// asks to the fleet (a request that asks again counts again).
	ours  bool
	asks  uint64
	close workload.RedisCost // what closing the nodes cost
	idle  *idleCost
}

// idleCost is what an idle fleet cost Redis: in the first second after its
// traffic, and after that (at rest).
type idleCost struct {
	first, rest       workload.RedisCost
	firstFor, restFor time.Duration
}

// keysResult is one workload's runs, one a contender.
type keysResult struct {
	w      keysWorkload
	stream *keyload.Stream
	runs   []*keysRun
	// empty is what Redis did with no client for a second, flushed (the
	// idle workload): its own timers' cost, the floor under an idle fleet.
	empty    workload.RedisCost
	emptyFor time.Duration
}

// measureKeys runs every workload o asks for, each contender in turn on a
// flushed Redis.
func measureKeys(ctx context.Context, o options, admin *redis.Client, addr string, cs []contender.Contender) ([]*keysResult, error) {
	var out []*keysResult
	for wi, w := range keysWorkloads(o) {
		m := o.many
		warmup, duration := m.warmup, m.duration
		if w.idle {
			warmup, duration = 0, m.idle.burst
		}
		began := time.Now()
		s, err := keyload.Generate(w.spec, m.history, warmup, duration)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", w.id, err)
		}
		logf("%s: %d requests laid out in %v (%d drawn before, for the first-request figures)", w.id, len(s.Requests), time.Since(began).Round(time.Millisecond),
			int64(float64(m.history.Seconds())*w.spec.Rate))
		kr := &keysResult{w: w, stream: s}
		if w.idle {
			if kr.empty, kr.emptyFor, err = measureEmpty(ctx, admin); err != nil {
				return nil, err
			}
		}
		for ci, c := range keysContenders(o, w, cs) {
			if err := admin.FlushAll(ctx).Err(); err != nil { // the private server only
				return nil, err
			}
			env := contender.Env{Addr: addr, Prefix: fmt.Sprintf("k%d.%d:", wi, ci), RedisTimeout: m.timeout}
			r, err := measureKeysRun(ctx, o, admin, env, c, w, s)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", w.id, c.Name, err)
			}
			logf("%s: %s", w.id, r.summary())
			kr.runs = append(kr.runs, r)
		}
		out = append(out, kr)
	}
	return out, nil
}

// summary is one line on the run, for the log.
func (r *keysRun) summary() string {
	if r.idle != nil {
		return fmt.Sprintf("%-28s at rest: %.1f Redis commands/s a node, Redis CPU %.2f ms/s", r.c.Name, r.idle.restCmdsPerNode(r.nodes), r.idle.restCPUPerSec())
	}
	mem := "—"
	if m, ok := r.fromMemory(); ok {
		mem = fmtPercent(m)
	}
	return fmt.Sprintf("%-28s %d of %d decided, %.1f%% admitted, %s from memory | Redis %.2f µs CPU, %.3f cmds a decision | p50 %s p99 %s (the call: p50 %s p99 %s)",
		r.c.Name, r.res.Decided, r.res.Offered, 100*float64(r.res.Admitted)/float64(max(r.res.Decided, 1)), mem,
		float64(r.cpuPerDecision())/1e3, r.cmdsPerDecision(), fmtQuantile(r.res, 0.5), fmtQuantile(r.res, 0.99),
		fmtDur(r.res.Service.Quantile(0.5)), fmtDur(r.res.Service.Quantile(0.99)))
}

func measureKeysRun(ctx context.Context, o options, admin *redis.Client, env contender.Env, c contender.Contender, w keysWorkload, s *keyload.Stream) (*keysRun, error) {
	limiters := make([]contender.Limiter, 0, w.spec.Nodes)
	closed := false
	defer func() {
		if !closed {
			for _, l := range limiters {
				_ = l.Close()
			}
		}
	}()
	nodes := make([]keyload.Node, 0, w.spec.Nodes)
	r := &keysRun{c: c, nodes: w.spec.Nodes}
	for range w.spec.Nodes {
		l, err := c.New(env, w.policy)
		if err != nil {
			return nil, err
		}
		limiters = append(limiters, l)
		n, ours := asNode(l)
		nodes = append(nodes, n)
		r.ours = ours
	}
	var before workload.RedisCounters
	var beforeAt time.Time
	var asks0 uint64
	var readErr error
	cfg := keyload.Config{Workers: o.many.workers, Drain: o.many.drain, OnMeasure: func() {
		asks0 = asks(limiters)
		before, readErr = workload.ReadRedis(ctx, admin)
		beforeAt = time.Now()
	}}
	if w.idle {
		cfg.OnMeasure = nil
	}
	res, err := keyload.Drive(ctx, nodes, s, cfg)
	if err != nil {
		return nil, err
	}
	if readErr != nil {
		return nil, readErr
	}
	r.res = res
	if w.idle {
		if r.idle, err = measureIdle(ctx, admin, o.many.idle.rest); err != nil {
			return nil, err
		}
	} else {
		after, err := workload.ReadRedis(ctx, admin)
		if err != nil {
			return nil, err
		}
		r.window = time.Since(beforeAt)
		r.redis = after.Sub(before)
		r.asks = asks(limiters) - asks0
		if r.acc, err = keyload.CompareExact(s, res.Outcomes, w.policy.Rate, w.policy.Burst); err != nil {
			return nil, err
		}
		if r.demand, err = keyload.ByDemand(s, res.Outcomes, res.Waits, w.policy.Rate, w.policy.Burst); err != nil {
			return nil, err
		}
	}
	last, err := workload.ReadRedis(ctx, admin)
	if err != nil {
		return nil, err
	}
	closed = true
	for _, l := range limiters {
		if err := l.Close(); err != nil {
			logf("%s: closing: %v", c.Name, err)
		}
	}
	final, err := workload.ReadRedis(ctx, admin)
	if err != nil {
		return nil, err
	}
	r.close = final.Sub(last)
	if res.Errors > 0 {
		logf("%s: %s: %d errors, the first: %v", w.id, c.Name, res.Errors, res.FirstError)
	}
	return r, ctx.Err()
}

// measureIdle reads what Redis does for rest after the traffic: the first
// second, then the rest.
func measureIdle(ctx context.Context, admin *redis.Client, rest time.Duration) (*idleCost, error) {
	var marks [3]workload.RedisCounters
	var at [3]time.Time
	for i, wait := range []time.Duration{0, time.Second, rest - time.Second} {
		time.Sleep(wait) // the run's context ends only with the process (main's signal handler)
		c, err := workload.ReadRedis(ctx, admin)
		if err != nil {
			return nil, err
		}
		marks[i], at[i] = c, time.Now()
	}
	return &idleCost{first: marks[1].Sub(marks[0]), rest: marks[2].Sub(marks[1]), firstFor: at[1].Sub(at[0]), restFor: at[2].Sub(at[1])}, nil
}

// floorFor is how long measureFloor sends.
const floorFor = 3 * time.Second

// measureFloor sends W1's traffic for floorFor to nodes that answer at
// once: the latency the driver and the machine add to every decision.
func measureFloor(ctx context.Context, o options) (*keyload.Result, error) {
	w := keysWorkloads(options{nodes: o.nodes, many: o.many})[0] // W1
	s, err := keyload.Generate(w.spec, 0, 500*time.Millisecond, floorFor)
	if err != nil {
		return nil, err
	}
	nodes := make([]keyload.Node, w.spec.Nodes)
	for i := range nodes {
		nodes[i] = func(context.Context, string) (keyload.Answer, error) {
			return keyload.Answer{Allowed: true, Source: keyload.Local}, nil
		}
	}
	res, err := keyload.Drive(ctx, nodes, s, keyload.Config{Workers: o.many.workers, Drain: o.many.drain})
	if err != nil {
		return nil, err
	}
	logf("the harness alone (nodes that answer at once): latency p50 %s p99 %s p999 %s", fmtQuantile(res, 0.5), fmtQuantile(res, 0.99), fmtQuantile(res, 0.999))
	return res, nil
}

// measureEmpty is what the flushed Redis does for a second with no client
// but the harness.
func measureEmpty(ctx context.Context, admin *redis.Client) (workload.RedisCost, time.Duration, error) {
	if err := admin.FlushAll(ctx).Err(); err != nil { // the private server only
		return workload.RedisCost{}, 0, err
	}
	before, err := workload.ReadRedis(ctx, admin)
	if err != nil {
		return workload.RedisCost{}, 0, err
	}
	began := time.Now()
	time.Sleep(time.Second)
	after, err := workload.ReadRedis(ctx, admin)
	if err != nil {
		return workload.RedisCost{}, 0, err
	}
	return after.Sub(before), time.Since(began), nil
}

// asks sums our nodes' count of asks to the fleet (Async's share protocol;
// zero in Sync): a request that asked again after a Retry counts again.
func asks(ls []contender.Limiter) uint64 {
	var n uint64
	for _, l := range ls {
		if h, ok := l.(contender.Hybrid); ok {
			n += h.Stats().Reconcile.Shares.Asks
		}
	}
	return n
}

// cpuPerDecision is Redis CPU over the decisions made while it was spent
// (Result.Answered: a backlog of warm-up requests answered in the
// measured stretch is what that stretch's work paid for).
func (r *keysRun) cpuPerDecision() time.Duration {
	return time.Duration(float64(r.redis.CPU) / float64(max(r.res.Answered, 1)))
}

// cmdsPerDecision is Redis commands (those Lua scripts run included) over
// the decisions made meanwhile.
func (r *keysRun) cmdsPerDecision() float64 {
	return float64(r.redis.Calls) / float64(max(r.res.Answered, 1))
}

// fromMemory is the share of the decisions answered from memory: Source
// Local and not waiting on Redis or the fleet (see waitProbe). ok is false
// for a peer, whose decisions do not say.
func (r *keysRun) fromMemory() (share float64, ok bool) {
	if !r.ours || r.res.Decided == 0 {
		return 0, false
	}
	return float64(r.res.FromMemory) / float64(r.res.Decided), true
}

// restCmdsPerNode is Redis commands a second a node at rest.
func (c *idleCost) restCmdsPerNode(nodes int) float64 {
	return float64(c.rest.Calls) / c.restFor.Seconds() / float64(max(nodes, 1))
}

// restCPUPerSec is Redis CPU at rest, milliseconds a second.
func (c *idleCost) restCPUPerSec() float64 {
	return float64(c.rest.CPU) / 1e6 / c.restFor.Seconds()
}

// parseWorkloads checks a -keys-workloads list.
func parseWorkloads(list string) ([]string, error) {
	var out []string
	for _, id := range strings.Split(list, ",") {
		id = strings.TrimSpace(id)
		if id == "" {
			continue
		}
		known := false
		for _, k := range workloadIDs {
			known = known || k == id
		}
		if !known {
			return nil, fmt.Errorf("-keys-workloads: unknown workload %q (known: %s)", id, strings.Join(workloadIDs, ","))
		}
		out = append(out, id)
	}
	return out, nil
}
