// Package sharesim runs a fleet of Async nodes against a model of the store
// on simulated time: every node's clock, the store's TIME, each round trip's
// delay and every fault follow from one seed, so a scenario replays exactly,
// and thousands run in a minute. The nodes are the real thing (the local
// engine and the reconciler's share protocol, package sync/protocol); the store
// is internal/storemodel, which a conformance test holds to the real
// scripts on a real redis-server.
//
// Generate draws a scenario from a seed: a fleet, its faults, and keys
// whose traffic takes every routing a rate limiter meets (one client pinned
// to one node, round robin, demand that hops from node to node, bursts, slow
// clients, weights up to the burst, several limits on one key, bursts
// smaller than the fleet, floods of new keys, abusers), and resets of keys
// under load (Reset). Run plays it; Check holds the record to both sides of
// the promise: never more than the bound over any window, and nothing
// refused that an exact limiter would admit, each request within AskWait;
// a reset makes the key fresh, and what follows it is judged so.
package sharesim

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
)

// Scenario is one run, drawn from Seed by Generate: the same seed gives the
// same scenario, and the same run.
type Scenario struct {
	Seed         int64
	Interval     time.Duration // Config.SyncInterval
	AskWait      time.Duration
	Lease        time.Duration
	ActiveWindow time.Duration
	FleetSize    int
	Duration     time.Duration // the traffic's span
	Nodes        []Node
	Faults       []Fault
	Keys         []Key
	Requests     []Request // in time order
	Resets       []Reset   // in time order
}

// Node is one node's life: made at Join (its first heartbeat must succeed
// before it decides), closed at Leave (Crash: it stops without closing),
// paused (a stopped process) over each of Pauses, and its clock Skew ahead
// of the store's (stepping by Step at StepAt, if Step is not zero).
type Node struct {
	Join, Leave time.Duration
	Crash       bool
	Pauses      []Span
	Skew        time.Duration
	StepAt      time.Duration
	Step        time.Duration
}

// Span is a stretch of the scenario.
type Span struct{ From, To time.Duration }

// FaultKind is what happens.
type FaultKind int

// The faults.
const (
	Kill      FaultKind = iota // the store stops answering (connections refused), and restarts empty at To
	Pause                      // the store holds every call from From to To, then runs them
	Slow                       // every call takes Latency longer each way
	Flush                      // at From the store loses every key (FLUSHALL), and answers on
	Evict                      // at From the store loses one contested key's state (Key)
	Partition                  // Node cannot reach the store from From to To
)

var faultNames = [...]string{"kill", "pause", "slow", "flush", "evict", "partition"}

func (k FaultKind) String() string { return faultNames[k] }

// Fault is one fault.
type Fault struct {
	Kind     FaultKind
	From, To time.Duration
	Latency  time.Duration // Slow
	Node     int           // Partition
	Key      int           // Evict
}

// Routing is how a key's traffic reaches the nodes.
type Routing int

// The routings.
const (
	Sticky     Routing = iota // one client pinned to one node (gRPC, Envoy, consistent hashing)
	RoundRobin                // each request to the next node
	Random                    // each request to a node drawn at random
	Hopping                   // all on one node, moving to the next every Hop
	Bursts                    // bursts, each on a node drawn at random
	SlowClient                // a request now and then, on one node
	Abuser                    // far over the limit, spread
	Flood                     // one of many new keys, each touched a few times
	// AllAtOnce: every node up gets a burst of the whole capacity at the
	// same instant (Gubernator's test of its GLOBAL behaviour), now and then,
	// at the fleet's start or just after a node joins among them: far over
	// the limit, for the bound.
	AllAtOnce
)

var routingNames = [...]string{"sticky", "round-robin", "random", "hopping", "bursts", "slow-client", "abuser", "flood", "all-at-once"}

func (r Routing) String() string { return routingNames[r] }

// Key is one client key: the limits each request is decided under (each
// separately, as a rules engine does) and how its traffic is routed.
type Key struct {
	Name    string
	Limits  []limit.Limit
	Routing Routing
	// Fraction is the share of the tightest limit the traffic aims at
	// (above 1: an abuser); Weight the heaviest request.
	Fraction float64
	Weight   int64
}

// Request is one request offered.
type Request struct {
	At   time.Duration
	Node int
	Key  int
	N    int64
}

// Reset is a reset of a key under load: at At, Node calls the Limiter's
// Reset of key Key under its limit Limit (an index in the key's Limits),
// as support staff letting a client back in do (hybrid.Limiter.Reset,
// Async mode: the store's reset, then the node's Shares.Reset, which the
// other nodes hear of through the registry). Missed: the fleet's channel
// misses it (it delivers at most once: a subscription dropped), and the
// other nodes hear of it only in the registry, at their next heartbeat,
// an interval or a quiet beat on: meanwhile they decide, and send ops, on
// their state from before it. Back: the client comes back (comeBack).
type Reset struct {
	At     time.Duration
	Node   int
	Key    int
	Limit  int
	Missed bool
	Back   bool
}

// Generate draws a scenario from seed.
func Generate(seed int64) *Scenario { return generate(seed, true) }

// generate draws a scenario from seed, its resets too if resets is set:
// without them, the scenario a seed drew before there were resets.
func generate(seed int64, resets bool) *Scenario {
	g := &gen{rng: rand.New(rand.NewPCG(uint64(seed), 0x5a7e5)), sc: &Scenario{Seed: seed}}
	g.fleet()
	g.faults()
	g.keys()
	slices.SortStableFunc(g.sc.Requests, func(a, b Request) int {
		switch {
		case a.At < b.At:
			return -1
		case a.At > b.At:
			return 1
		}
		return 0
	})
	if resets {
		g.resets()
	}
	return g.sc
}

type gen struct {
	rng *rand.Rand
	sc  *Scenario
}

func (g *gen) pick(xs ...int) int { return xs[g.rng.IntN(len(xs))] }

func (g *gen) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(g.rng.Int64N(int64(hi-lo)+1))
}

func (g *gen) chance(pct int) bool { return g.rng.IntN(100) < pct }

func (g *gen) fleet() {
	sc, r := g.sc, g.rng
	sc.Interval = time.Duration(g.pick(5, 10, 20, 20, 20, 50)) * time.Millisecond
	sc.AskWait = 2 * sc.Interval
	sc.Lease = max(50*sc.Interval, time.Second)
	sc.ActiveWindow = max(50*sc.Interval, time.Second)
	if g.chance(20) {
		sc.Lease = time.Duration(g.pick(10, 20)) * sc.Interval
	}
	sc.Duration = g.between(2*time.Second, 5*time.Second).Round(100 * time.Millisecond)
	n := 1 + r.IntN(8)
	if g.chance(35) {
		sc.FleetSize = n
	}
	sc.Nodes = make([]Node, n)
	for i := range sc.Nodes {
		nd := &sc.Nodes[i]
		nd.Leave = sc.Duration
		nd.Skew = time.Duration(r.IntN(101)-50) * time.Millisecond
		if g.chance(5) {
			nd.StepAt = g.between(sc.Duration/4, sc.Duration*3/4)
			nd.Step = time.Duration(g.pick(-300, -50, 50, 300)) * time.Millisecond
		}
	}
	// Nodes joining, leaving, crashing, pausing: node 0 stays, so every
	// routing has somewhere to go.
	if n >= 2 && g.chance(40) {
		for _, i := range r.Perm(n)[:1+r.IntN(min(2, n-1))] {
			if i == 0 {
				continue
			}
			nd := &sc.Nodes[i]
			switch x := r.IntN(6); {
			case x <= 2: // a join, late
				nd.Join = g.between(sc.Duration/5, sc.Duration/2).Round(time.Millisecond)
			case x == 3:
				nd.Leave = g.between(sc.Duration/3, sc.Duration*4/5).Round(time.Millisecond)
			case x == 4:
				nd.Leave = g.between(sc.Duration/3, sc.Duration*4/5).Round(time.Millisecond)
				nd.Crash = true
			default:
				from := g.between(sc.Duration/5, sc.Duration/2).Round(time.Millisecond)
				long := time.Duration(g.pick(50, 300, 1500)) * time.Millisecond
				nd.Pauses = append(nd.Pauses, Span{from, from + long})
			}
		}
	}
}

func (g *gen) faults() {
	sc, r := g.sc, g.rng
	if !g.chance(45) {
		return
	}
	count := 1
	if g.chance(20) {
		count = 2
	}
	twice := g.chance(10) // restarted empty, then failing again
	if twice {
		count = 2
	}
	at := g.between(sc.Duration/5, sc.Duration/3).Round(10 * time.Millisecond)
	for i := range count {
		f := Fault{Kind: FaultKind(r.IntN(6)), From: at}
		if twice {
			f.Kind = []FaultKind{Kill, FaultKind(g.pick(int(Kill), int(Flush), int(Pause)))}[i]
		}
		f.To = at + g.between(200*time.Millisecond, 900*time.Millisecond).Round(10*time.Millisecond)
		switch f.Kind {
		case Slow:
			f.Latency = time.Duration(g.pick(5, 20, 100)) * time.Millisecond
		case Flush, Evict:
			f.To = f.From
		case Partition:
			f.Node = r.IntN(len(sc.Nodes))
		}
		sc.Faults = append(sc.Faults, f)
		at = f.To + g.between(50*time.Millisecond, 600*time.Millisecond).Round(10*time.Millisecond)
		if at > sc.Duration*3/4 {
			break
		}
	}
}

// present reports whether node i is up at at.
func (sc *Scenario) present(i int, at time.Duration) bool {
	nd := sc.Nodes[i]
	return at >= nd.Join && at < nd.Leave
}

// up returns the nodes up at at.
func (sc *Scenario) up(at time.Duration) []int {
	var out []int
	for i := range sc.Nodes {
		if sc.present(i, at) {
			out = append(out, i)
		}
	}
	return out
}

func (g *gen) algorithm() limit.Algorithm {
	switch x := g.rng.IntN(100); {
	case x < 60:
		return limit.TokenBucket
	case x < 70:
		return limit.LeakyBucket
	case x < 85:
		return limit.FixedWindow
	}
	return limit.SlidingWindowCounter
}

// limitOf draws a limit of algorithm a.
func (g *gen) limitOf(a limit.Algorithm) limit.Limit {
	r := g.rng
	rates := []int64{1, 2, 3, 5, 10, 20, 50, 100, 300, 1000}
	rate := rates[r.IntN(len(rates))]
	period := time.Second
	switch r.IntN(6) {
	case 0:
		period = 100 * time.Millisecond
	case 1:
		period = 10 * time.Second
	}
	lim := limit.Limit{Rate: rate, Period: period, Algorithm: a}
	if a == limit.TokenBucket && g.chance(50) {
		lim.Burst = max(1, int64(float64(rate)*[]float64{0.1, 0.5, 2}[r.IntN(3)]))
	}
	// Keep every key's decisions within what a run can hold.
	for perSecond(lim) > 2000 {
		lim.Period *= 2
	}
	return lim.Canonical()
}

func perSecond(l limit.Limit) float64 { return float64(l.Rate) / l.Period.Seconds() }

func (g *gen) keys() {
	count := 1 + g.rng.IntN(5)
	for k := range count {
		g.key(fmt.Sprintf("k%d", k))
	}
	if g.chance(15) {
		g.flood()
	}
}

// key adds one key and its traffic.
func (g *gen) key(name string) {
	sc, r := g.sc, g.rng
	a := g.algorithm()
	routings := []Routing{Sticky, Sticky, RoundRobin, Random, Hopping, Bursts, SlowClient, Abuser, AllAtOnce}
	k := Key{Name: name, Limits: []limit.Limit{g.limitOf(a)}, Routing: routings[r.IntN(len(routings))], Weight: 1}
	for try := 0; k.Routing == AllAtOnce && k.Limits[0].Capacity() > 200; try++ {
		// Every node bursting a capacity of thousands would be most of a
		// search's decisions: keep it to what shows the bound.
		k.Limits[0] = g.limitOf(a)
		if try == 10 {
			k.Limits[0] = limit.Limit{Rate: 100, Period: time.Second, Algorithm: a}.Canonical()
		}
	}
	if g.chance(15) {
		// Several limits on one key: a per-second one and a longer one.
		l2 := g.limitOf(g.algorithm())
		l2.Period *= 10
		l2.Rate = max(l2.Rate, k.Limits[0].Rate*5)
		k.Limits = append(k.Limits, l2.Canonical())
	}
	tight := k.Limits[0]
	for _, l := range k.Limits[1:] {
		if perSecond(l) < perSecond(tight) {
			tight = l
		}
	}
	least := tight.Capacity()
	for _, l := range k.Limits {
		least = min(least, l.Capacity())
	}
	if g.chance(20) && least > 1 {
		k.Weight = 1 + r.Int64N(least)
	}
	switch k.Routing {
	case Abuser:
		k.Fraction = 1.5 + 3*r.Float64()
	case AllAtOnce:
		k.Fraction = float64(len(sc.Nodes))
	default:
		k.Fraction = []float64{0.3, 0.5, 0.8, 0.95, 1}[r.IntN(5)]
	}
	idx := len(sc.Keys)
	sc.Keys = append(sc.Keys, k)
	g.traffic(idx, tight)
}

// traffic draws key idx's requests, aimed at fraction of limit tight.
func (g *gen) traffic(idx int, tight limit.Limit) {
	sc, r := g.sc, g.rng
	k := &sc.Keys[idx]
	rate := k.Fraction * perSecond(tight) / float64(max(k.Weight, 1))
	rate = math.Min(rate, 1500)
	from := g.between(0, sc.Duration/5)
	to := sc.Duration - g.between(0, sc.Duration/10)
	home := g.home(from)
	emit := func(at time.Duration, node int) {
		if at < 0 || at >= sc.Duration || !sc.present(node, at) {
			return
		}
		n := k.Weight
		if n > 1 && g.chance(50) {
			n = 1 + r.Int64N(n)
		}
		sc.Requests = append(sc.Requests, Request{At: at, Node: node, Key: idx, N: n})
	}
	step := func(rate float64) time.Duration { return time.Duration(float64(time.Second) / math.Max(rate, 1e-3)) }
	switch k.Routing {
	case Sticky:
		// A client pinned to one node (now and then one that joined late,
		// from its first moments): a burst of the whole capacity now and
		// then, paced traffic in between, and a refill's quiet before each
		// burst that follows paced traffic, so that the burst is compliant.
		if late := g.lateJoiner(); late >= 0 && g.chance(50) {
			home = late
			from = max(from, sc.Nodes[late].Join+g.between(0, 20*time.Millisecond))
		}
		burst := tight.Capacity() / max(k.Weight, 1)
		refill := time.Duration(float64(tight.Capacity()) / perSecond(tight) * float64(time.Second))
		paced := false
		for at := from; at < to; {
			if g.chance(40) {
				if paced {
					at += refill + time.Millisecond
				}
				for range burst {
					emit(at, home)
				}
				at += max(refill+refill/4, sc.Interval) + time.Millisecond
				paced = false
				continue
			}
			emit(at, home)
			at += step(rate)
			paced = true
		}
	case AllAtOnce:
		// Every node up gets a burst of the whole capacity at one instant:
		// at the start, after a join, or at a random time; then again after
		// a refill or two.
		burst := max(tight.Capacity()/max(k.Weight, 1), 1)
		refill := time.Duration(float64(tight.Capacity()) / perSecond(tight) * float64(time.Second))
		at := from
		switch x := r.IntN(3); {
		case x == 0:
			at = 0
		case x == 1 && g.lateJoiner() >= 0:
			at = sc.Nodes[g.lateJoiner()].Join + g.between(0, 3*sc.Interval)
		}
		for i := 0; at < to && i < 3; i, at = i+1, at+max(refill, sc.Interval)*time.Duration(1+r.IntN(2))+time.Millisecond {
			for _, node := range sc.up(at) {
				for range burst {
					emit(at, node)
				}
			}
		}
	case RoundRobin:
		i := 0
		for at := from; at < to; at += step(rate) {
			up := sc.up(at)
			if len(up) == 0 {
				continue
			}
			emit(at, up[i%len(up)])
			i++
		}
	case Random, Abuser:
		for at := from; at < to; {
			up := sc.up(at)
			if len(up) > 0 {
				emit(at, up[r.IntN(len(up))])
			}
			gap := time.Duration(r.ExpFloat64() * float64(step(rate)))
			if k.Routing == Random {
				gap = step(rate) // paced: compliant when the fraction is
			}
			at += max(gap, time.Microsecond)
		}
	case Hopping:
		hop := time.Duration(g.pick(50, 100, 200, 500)) * time.Millisecond
		for at := from; at < to; at += step(rate) {
			up := sc.up(at)
			if len(up) == 0 {
				continue
			}
			emit(at, up[int(at/hop)%len(up)])
		}
	case Bursts:
		burst := max(1, int64(float64(tight.Capacity())*k.Fraction)/max(k.Weight, 1))
		refill := time.Duration(float64(tight.Capacity()) / perSecond(tight) * float64(time.Second))
		for at := from; at < to; at += max(refill+refill/4, 2*sc.Interval) + time.Millisecond {
			up := sc.up(at)
			if len(up) == 0 {
				continue
			}
			node := up[r.IntN(len(up))]
			for range burst {
				emit(at, node)
			}
		}
	case SlowClient:
		gap := max(step(perSecond(tight)*k.Fraction/2), 200*time.Millisecond)
		for at := from; at < to; at += gap {
			emit(at, home)
		}
	}
}

// lateJoiner is a node that joins after the start (the first), or -1.
func (g *gen) lateJoiner() int {
	for i, nd := range g.sc.Nodes {
		if nd.Join > 0 {
			return i
		}
	}
	return -1
}

// home is a node up at at, for a client pinned to it.
func (g *gen) home(at time.Duration) int {
	up := g.sc.up(at)
	if len(up) == 0 {
		return 0
	}
	return up[g.rng.IntN(len(up))]
}

// flood adds many new keys, each touched a few times on random nodes.
func (g *gen) flood() {
	sc, r := g.sc, g.rng
	lim := g.limitOf(limit.TokenBucket)
	count := 50 + r.IntN(300)
	for i := range count {
		idx := len(sc.Keys)
		sc.Keys = append(sc.Keys, Key{Name: fmt.Sprintf("f%d", i), Limits: []limit.Limit{lim}, Routing: Flood, Fraction: 1, Weight: 1})
		at := g.between(0, sc.Duration*9/10)
		for range 1 + r.IntN(3) {
			up := sc.up(at)
			if len(up) > 0 {
				sc.Requests = append(sc.Requests, Request{At: at, Node: up[r.IntN(len(up))], Key: idx, N: 1})
			}
			at += g.between(time.Millisecond, sc.Duration/4)
			if at >= sc.Duration {
				break
			}
		}
	}
}

// Resets under load.
const (
	resetPct  = 30 // the scenarios with resets
	resetMost = 3  // the most resets in one
)

// resets draws the scenario's resets, from a stream of its own (seeded from
// the seed): every other draw is as it was before resets were, so a seed
// that draws none plays the scenario it always did (the regression seeds
// hold). Each resets a key with traffic, most often one under pressure (an
// abuser, every node bursting at once, a client bursting the whole
// capacity: exhausted, where a reset matters), and most often just after
// one of its bursts, when the key has no room left; half of them the
// fleet's channel misses, and after half of them the client comes back.
func (g *gen) resets() {
	sc := g.sc
	rg := &gen{rng: rand.New(rand.NewPCG(uint64(sc.Seed), 0x2e5e7)), sc: sc}
	if !rg.chance(resetPct) {
		return
	}
	keys, weights := resettable(sc)
	if len(keys) == 0 {
		return
	}
	for range 1 + rg.rng.IntN(resetMost) {
		k := keys[rg.weighted(weights)]
		at := rg.resetTime(k)
		up := sc.up(at)
		if len(up) == 0 {
			continue
		}
		sc.Resets = append(sc.Resets, Reset{At: at, Node: up[rg.rng.IntN(len(up))], Key: k,
			Limit: rg.rng.IntN(len(sc.Keys[k].Limits)), Missed: rg.chance(50), Back: rg.chance(50)})
	}
	slices.SortStableFunc(sc.Resets, func(a, b Reset) int { return cmp.Compare(a.At, b.At) })
	for _, r := range sc.Resets {
		if r.Back {
			rg.comeBack(r)
		}
	}
	slices.SortStableFunc(sc.Requests, func(a, b Request) int { return cmp.Compare(a.At, b.At) })
}

// comeBack replaces key r.Key's traffic from reset r on with its client
// coming back, let in again, through a node drawn at random (a load
// balancer's pick, most often not the node that held the key): a few
// requests at once (a tenth of the capacity: its retries, while the
// other nodes hear of the reset), then after a retry's back-off a burst of
// half the capacity, then a third of the rate, on that node until the
// key's traffic would have ended. A fresh key admits it all; a key the
// reset left exhausted refuses it (the bug 8ba624f fixed: the node that
// held the key, not having heard of the reset, gave its spent share back
// into the pool the reset made fresh).
func (g *gen) comeBack(r Reset) {
	sc := g.sc
	key := sc.Keys[r.Key]
	lim := key.Limits[r.Limit]
	w := max(key.Weight, 1)
	end := r.At
	sc.Requests = slices.DeleteFunc(sc.Requests, func(q Request) bool {
		if q.Key != r.Key {
			return false
		}
		end = max(end, q.At)
		return q.At >= r.At
	})
	at := r.At + g.between(time.Millisecond, 3*time.Millisecond).Round(100*time.Microsecond)
	up := sc.up(at)
	if len(up) == 0 {
		return
	}
	node := up[g.rng.IntN(len(up))]
	emit := func(at time.Duration, count int64) {
		for range count {
			if at < sc.Duration && sc.present(node, at) {
				sc.Requests = append(sc.Requests, Request{At: at, Node: node, Key: r.Key, N: w})
			}
		}
	}
	emit(at, max(lim.Capacity()/10/w, 1))
	at += g.between(300*time.Millisecond, 600*time.Millisecond).Round(time.Millisecond)
	emit(at, max(lim.Capacity()/2/w, 1))
	step := time.Duration(float64(time.Second) * float64(w) / (perSecond(lim) / 3))
	for at += step; at < end; at += step {
		emit(at, 1)
	}
}

// resettable returns the keys a reset may pick (those with traffic, not a
// flood's) and each one's weight: three for a key under pressure, one
// otherwise.
func resettable(sc *Scenario) (keys, weights []int) {
	traffic := map[int]bool{}
	for _, r := range sc.Requests {
		traffic[r.Key] = true
	}
	for k, key := range sc.Keys {
		if !traffic[k] || key.Routing == Flood {
			continue
		}
		w := 1
		switch {
		case key.Routing == Abuser, key.Routing == AllAtOnce, key.Routing == Sticky,
			key.Routing == Bursts && key.Fraction >= 0.95:
			w = 3
		}
		keys, weights = append(keys, k), append(weights, w)
	}
	return keys, weights
}

// weighted draws an index of weights, each in proportion to its weight.
func (g *gen) weighted(weights []int) int {
	total := 0
	for _, w := range weights {
		total += w
	}
	x := g.rng.IntN(total)
	for i, w := range weights {
		if x < w {
			return i
		}
		x -= w
	}
	return len(weights) - 1
}

// resetTime draws when key k is reset: mostly a few rounds after one of
// its bursts (several requests on one node at one instant) in the first
// three quarters of the scenario, the key exhausted; else within the
// middle of its traffic. Either leaves traffic after the reset to judge.
func (g *gen) resetTime(k int) time.Duration {
	sc := g.sc
	var times, bursts []time.Duration
	for i, r := range sc.Requests {
		if r.Key != k {
			continue
		}
		times = append(times, r.At)
		if i > 0 && sc.Requests[i-1].Key == k && sc.Requests[i-1].At == r.At && sc.Requests[i-1].Node == r.Node &&
			r.At <= sc.Duration*3/4 && (len(bursts) == 0 || bursts[len(bursts)-1] != r.At) {
			bursts = append(bursts, r.At)
		}
	}
	if len(bursts) > 0 && g.chance(70) {
		return bursts[g.rng.IntN(len(bursts))] + g.between(time.Millisecond, 3*sc.Interval).Round(time.Millisecond)
	}
	first, last := times[0], min(times[len(times)-1], sc.Duration*3/4)
	return g.between(first+(last-first)/5, first+(last-first)*4/5).Round(time.Millisecond)
}

// String describes the scenario on one line.
func (sc *Scenario) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d nodes, interval %v, lease %v, %v", sc.Seed, len(sc.Nodes), sc.Interval, sc.Lease, sc.Duration)
	if sc.FleetSize > 0 {
		fmt.Fprintf(&b, ", fleet size %d", sc.FleetSize)
	}
	for _, f := range sc.Faults {
		fmt.Fprintf(&b, ", %v %v-%v", f.Kind, f.From, f.To)
	}
	for i, n := range sc.Nodes {
		if n.Join > 0 || n.Leave < sc.Duration || len(n.Pauses) > 0 || n.Step != 0 {
			fmt.Fprintf(&b, ", node %d [%v, %v crash=%v pauses=%v step=%v@%v]", i, n.Join, n.Leave, n.Crash, n.Pauses, n.Step, n.StepAt)
		}
	}
	keys := 0
	for _, k := range sc.Keys {
		if k.Routing != Flood {
			keys++
		}
	}
	for _, r := range sc.Resets {
		fmt.Fprintf(&b, ", reset %s [%v] by node %d at %v", sc.Keys[r.Key].Name, sc.Keys[r.Key].Limits[r.Limit], r.Node, r.At)
		if r.Missed {
			b.WriteString(" (the channel missed it)")
		}
		if r.Back {
			b.WriteString(" (the client comes back)")
		}
	}
	fmt.Fprintf(&b, "; %d keys, %d requests", len(sc.Keys), len(sc.Requests))
	return b.String()
}
