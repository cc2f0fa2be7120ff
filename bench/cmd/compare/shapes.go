package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hybridlimit/hybridlimit/bench/contender"
	"github.com/hybridlimit/hybridlimit/bench/measure"
	"github.com/hybridlimit/hybridlimit/hybrid"
)

// The shapes: one client's traffic in three shapes, the same instants sent
// to a fleet of o.nodes nodes of each contender (ours in Async, ours in
// Sync as the exact control, Gubernator forwarding every request to the
// key's owner, Gubernator GLOBAL), and what each admitted next to what one
// exact limiter admits of the same requests at the same instants.

// shapesOptions are the shapes' settings.
type shapesOptions struct {
	on     bool             // -shapes: false skips them
	only   bool             // -shapes-only: nothing else
	policy contender.Policy // the client's limit
	rounds int              // bursts of the two burst shapes, each after a full refill
	abuse  time.Duration    // how long the abusive client sends
	over   float64          // the abusive client's rate, in multiples of the limit's
}

// gap is the time between two rounds of a burst: twice a full refill, so
// that every round finds the limit full, and a fleet that reconciles has
// had time to settle.
func (s shapesOptions) gap() time.Duration {
	return 2 * time.Duration(s.policy.Burst) * time.Second / time.Duration(s.policy.Rate)
}

// send is one request of a shape: to which node, when (from the shape's
// start), in which round.
type send struct {
	node, round int
	at          time.Duration
}

// shape is one traffic shape. plan lays out its requests for nodes nodes,
// the sticky burst on node sticky.
type shape struct {
	name  string
	about func(o options) string
	plan  func(o options, sticky int) []send
}

var shapes = []shape{
	{
		name: "sticky burst",
		about: func(o options) string {
			return fmt.Sprintf("one client's whole burst (%d requests at once) on one node of %d, %d times, %v apart", o.shapes.policy.Burst, o.nodes, o.shapes.rounds, o.shapes.gap())
		},
		plan: func(o options, sticky int) []send {
			var ss []send
			for r := range o.shapes.rounds {
				for range o.shapes.policy.Burst {
					ss = append(ss, send{node: sticky, round: r, at: time.Duration(r) * o.shapes.gap()})
				}
			}
			return ss
		},
	},
	{
		name: "a burst on every node at once",
		about: func(o options) string {
			return fmt.Sprintf("each of %d nodes sends %d requests at the same instant, on the same key, %d times, %v apart", o.nodes, o.shapes.policy.Burst, o.shapes.rounds, o.shapes.gap())
		},
		plan: func(o options, _ int) []send {
			var ss []send
			for r := range o.shapes.rounds {
				for i := range o.shapes.policy.Burst * int64(o.nodes) {
					ss = append(ss, send{node: int(i) % o.nodes, round: r, at: time.Duration(r) * o.shapes.gap()})
				}
			}
			return ss
		},
	},
	{
		name: "abusive client spread over the nodes",
		about: func(o options) string {
			return fmt.Sprintf("%g× the limit (%.0f requests/s), spread evenly over %d nodes in turn, for %v", o.shapes.over, o.shapes.over*float64(o.shapes.policy.Rate), o.nodes, o.shapes.abuse)
		},
		plan: func(o options, _ int) []send {
			step := time.Duration(float64(time.Second) / (o.shapes.over * float64(o.shapes.policy.Rate)))
			var ss []send
			for i := 0; time.Duration(i)*step < o.shapes.abuse; i++ {
				ss = append(ss, send{node: i % o.nodes, at: time.Duration(i) * step})
			}
			return ss
		},
	},
}

// shapeFleet is one contender as a fleet of nodes sharing one limit.
type shapeFleet struct {
	name, module, config string
	nodes                []contender.Limiter
	// sticky is the node that takes the sticky burst on key.
	sticky func(key string) int
	close  func()
}

// shapeResult is one fleet's run of one shape.
type shapeResult struct {
	shape                     string
	fleet                     *shapeFleet
	offered, admitted, errors int64
	exact                     int64   // what one exact limiter admits of the same requests, seen when sent
	rounds                    []int64 // admitted in each round
	degraded                  int64
	latency                   measure.Histogram
	firstError                error
	sent                      []time.Time // when each request was sent
}

// fleetMaker starts the shapes' fleets, one at a time, on the private Redis
// and on one Gubernator cluster that it starts when first asked and stops
// in close.
type fleetMaker struct {
	o     options
	addr  string
	guber *contender.Gubernator
}

// hybrid is c as o.nodes nodes, each with its own Redis client, its
// RedisTimeout redisTimeout (zero: the default).
func (m *fleetMaker) hybrid(c contender.Contender, prefix string, redisTimeout time.Duration) (*shapeFleet, error) {
	f := &shapeFleet{name: c.Name, module: c.Module, config: c.Config(m.o.shapes.policy), sticky: func(string) int { return 0 }}
	if redisTimeout != 0 {
		f.config += fmt.Sprintf("; RedisTimeout %v here", redisTimeout)
	}
	f.close = func() {
		for _, n := range f.nodes {
			if err := n.Close(); err != nil {
				logf("%s: closing: %v", c.Name, err)
			}
		}
	}
	for range m.o.nodes {
		n, err := c.New(contender.Env{Addr: m.addr, Prefix: prefix, RedisTimeout: redisTimeout}, m.o.shapes.policy)
		if err != nil {
			f.close()
			return nil, err
		}
		f.nodes = append(f.nodes, n)
	}
	return f, nil
}

// gubernator is the cluster's o.nodes daemons deciding in the namespace ns,
// with the GLOBAL behaviour or not.
func (m *fleetMaker) gubernator(name, ns string, global bool) (*shapeFleet, error) {
	if m.guber == nil {
		g, err := contender.StartGubernator(m.o.nodes)
		if err != nil {
			return nil, err
		}
		m.guber = g
	}
	f := &shapeFleet{name: name, module: contender.GubernatorModule, config: contender.GubernatorConfig(m.o.shapes.policy, global), close: func() {}}
	for i := range m.o.nodes {
		f.nodes = append(f.nodes, m.guber.Node(i, ns, m.o.shapes.policy, global))
	}
	// The sticky burst lands on a daemon that does not own the key, as it
	// does for n-1 keys of n; on the owner, both behaviours decide in
	// memory, exactly.
	f.sticky = func(key string) int {
		owner, err := m.guber.Owner(ns, key)
		if err != nil {
			logf("%s: %v", name, err)
		}
		return (owner + 1) % m.o.nodes
	}
	return f, nil
}

func (m *fleetMaker) close() {
	if m.guber != nil {
		if err := m.guber.Close(); err != nil {
			logf("shapes: %v", err)
		}
	}
}

// syncControlTimeout is the RedisTimeout of our Sync fleet in the shapes:
// it is the exact control, so a burst of hundreds of decisions queued on a
// busy machine must wait for Redis rather than be decided by the fallback.
const syncControlTimeout = time.Second

// fleetStart names a fleet and starts it.
type fleetStart struct {
	name  string
	start func() (*shapeFleet, error)
}

// shapeFleets are the fleets of the shapes, in the order they run.
func shapeFleets(m *fleetMaker) []fleetStart {
	var exact contender.Contender // our Sync at its defaults
	for _, c := range contender.All() {
		if c.Name == "hybridlimit Sync" {
			exact = c
		}
	}
	async := contender.HybridAsync(hybrid.DefaultSyncInterval)
	async.Name = "hybridlimit Async" // at its defaults
	return []fleetStart{
		{async.Name, func() (*shapeFleet, error) { return m.hybrid(async, "sa:", 0) }},
		{exact.Name, func() (*shapeFleet, error) { return m.hybrid(exact, "ss:", syncControlTimeout) }},
		{"Gubernator default", func() (*shapeFleet, error) { return m.gubernator("Gubernator default", "default", false) }},
		{"Gubernator GLOBAL", func() (*shapeFleet, error) { return m.gubernator("Gubernator GLOBAL", "global", true) }},
	}
}

// measureShapes runs every shape on every fleet whose name matches -only,
// one fleet at a time.
func measureShapes(ctx context.Context, o options, addr string) ([]*shapeResult, error) {
	m := &fleetMaker{o: o, addr: addr}
	defer m.close()
	var out []*shapeResult
	for _, fl := range shapeFleets(m) {
		if !o.only.MatchString(fl.name) {
			continue
		}
		f, err := fl.start()
		if err != nil {
			return nil, fmt.Errorf("shapes: %s: %w", fl.name, err)
		}
		for i, s := range shapes {
			key := fmt.Sprintf("shape%d", i) // a new key for every shape: each starts cold
			r := runShape(ctx, f, s.plan(o, f.sticky(key)), key)
			r.shape, r.fleet = s.name, f
			r.exact = measure.ExactAdmits(o.shapes.policy.Rate, o.shapes.policy.Burst, r.sent)
			logf("shapes: %-36s %-20s admitted %d of %d (exact %d), rounds %v | p50 %v p99 %v | %d errors, %d degraded",
				s.name, f.name, r.admitted, r.offered, r.exact, r.rounds, r.latency.Quantile(0.5), r.latency.Quantile(0.99), r.errors, r.degraded)
			if r.firstError != nil {
				logf("shapes: %s: first error: %v", f.name, r.firstError)
			}
			out = append(out, r)
		}
		f.close()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	if len(out) == 0 {
		return nil, errors.New("shapes: no fleet matches -only")
	}
	return out, nil
}

// runShape sends the planned requests on key, each in its own goroutine
// started at its instant (those of one instant are started together), and
// waits for every answer.
func runShape(ctx context.Context, f *shapeFleet, plan []send, key string) *shapeResult {
	type answer struct {
		sent    time.Time
		took    time.Duration
		allowed bool
		err     error
	}
	answers := make([]answer, len(plan))
	deg0 := fleetDegraded(f)
	var wg sync.WaitGroup
	start := time.Now()
	for i, s := range plan {
		if d := time.Until(start.Add(s.at)); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			ok, err := f.nodes[s.node].Allow(ctx, key)
			answers[i] = answer{t0, time.Since(t0), ok, err}
		}()
	}
	wg.Wait()
	rounds := 0
	for _, s := range plan {
		rounds = max(rounds, s.round+1)
	}
	r := &shapeResult{offered: int64(len(plan)), rounds: make([]int64, rounds)}
	for i, a := range answers {
		r.sent = append(r.sent, a.sent)
		r.latency.Record(a.took)
		switch {
		case a.err != nil:
			r.errors++
			if r.firstError == nil {
				r.firstError = a.err
			}
		case a.allowed:
			r.admitted++
			r.rounds[plan[i].round]++
		}
	}
	r.degraded = fleetDegraded(f) - deg0
	return r
}

func fleetDegraded(f *shapeFleet) int64 {
	var n int64
	for _, l := range f.nodes {
		n += degraded(l)
	}
	return n
}

// writeShapes writes the shapes section of the report.
func writeShapes(b *strings.Builder, o options, rs []*shapeResult) {
	s := o.shapes
	fmt.Fprintf(b, "## Traffic shapes: hybridlimit and Gubernator\n\n")
	fmt.Fprintf(b, "One client limited to %s, its requests sent to fleets of %d nodes of each contender, one fleet at a time, each request in its own goroutine at its instant. "+
		"**exact** is what one exact limiter (a single token bucket of the same limit, starting full) admits of the same requests seen at the instants they were sent. "+
		"A limiter that decides when a request reaches it, after the request waited its turn behind hundreds of others (Sync, Gubernator's default), also admits what refilled meanwhile: one request per %v. "+
		"Latency is each decision's, `time.Now` around the call, all rounds together.\n\n", s.policy, o.nodes, time.Second/time.Duration(s.policy.Rate))
	for i, sh := range shapes {
		fmt.Fprintf(b, "%c. **%s**: %s.\n", 'a'+i, sh.name, sh.about(o))
	}
	fmt.Fprintf(b, "\n| shape | contender | admitted | exact | admitted per round | latency p50 / p99 | errors | degraded |\n")
	fmt.Fprintf(b, "|---|---|---:|---:|---|---:|---:|---:|\n")
	for _, r := range rs {
		rounds := "—"
		if len(r.rounds) > 1 {
			rounds = strings.Trim(fmt.Sprint(r.rounds), "[]")
		}
		fmt.Fprintf(b, "| %s | %s | %d of %d | %d | %s | %s / %s | %d | %d |\n", r.shape, r.fleet.name, r.admitted, r.offered, r.exact, rounds,
			fmtDur(r.latency.Quantile(0.5)), fmtDur(r.latency.Quantile(0.99)), r.errors, r.degraded)
	}
	fmt.Fprintf(b, "\n- **Our fleets**: %d `hybrid.Limiter` nodes, each with its own Redis client to the private redis-server. Async at its defaults; Sync, the exact control, with `RedisTimeout` %v "+
		"so that a burst of hundreds of decisions queued on a busy machine waits for Redis instead of going to the fallback. "+
		"**degraded** counts our decisions made without Redis because it did not answer within `RedisTimeout`.\n", o.nodes, syncControlTimeout)
	fmt.Fprintf(b, "- **Gubernator**: one in-process cluster of %d daemons started by its `cluster` package (GlobalSyncWait 50 ms as that package sets it; the daemon's default is 100 ms; BatchWait 500 µs, its default). "+
		"A node's decision is a call to its daemon's `V1Instance.GetRateLimits` in process: an application calling its Gubernator over gRPC pays a loopback round trip more. "+
		"The sticky burst lands on a daemon that does not own the key (as %d keys of %d do); on the owner both behaviours decide in memory, exactly. "+
		"**Default**: a daemon forwards each request to the key's owner (batched for up to 500 µs); under a steady overload it admits a few percent less than an exact limiter, because its leaky bucket drops what is left of a token when a request takes the last whole one (`leakyBucket` in its algorithms.go). **GLOBAL**: a daemon answers from its own copy of the key and sends the hits to the owner every GlobalSyncWait; the owner broadcasts the key's state back.\n\n",
		o.nodes, o.nodes-1, o.nodes)
	fmt.Fprintf(b, "| contender | module | configured as |\n|---|---|---|\n")
	seen := map[*shapeFleet]bool{}
	for _, r := range rs {
		if f := r.fleet; !seen[f] {
			seen[f] = true
			fmt.Fprintf(b, "| %s | `%s` | `%s` |\n", f.name, f.module, f.config)
		}
	}
	fmt.Fprintf(b, "\n")
}
