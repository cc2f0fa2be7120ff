package fleetcheck

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/limit"
)

// Scenario is one run of a fleet: its configuration, when each node is up,
// the fault Redis suffers, the keys with their limits, and every request,
// all drawn from Seed by Generate. The same seed always gives the same
// scenario, so a failure is replayed from its seed alone.
type Scenario struct {
	Seed     int64
	Mode     hybrid.Mode
	Fallback hybrid.Fallback
	Interval time.Duration // Config.SyncInterval
	Duration time.Duration // the traffic's span
	MaxKeys  int           // Config.MaxKeys; 0 means the default
	// ActiveWindow is Config.ActiveWindow (0: the default, 50 intervals
	// and at least a second): how long a silent node still counts on a key.
	ActiveWindow time.Duration
	Nodes        []Span // one per node
	Fault        Fault
	Keys         []Key
	// Requests is every request offered, in time order.
	Requests []Request
	// RTT is the round-trip allowance the bound is given.
	RTT time.Duration
	// FleetSize is Config.FleetSize: the number of nodes that start
	// together (a fleet deployed at once, as docs/accuracy.md advises), or
	// now and then zero (the README's example sets none), which the
	// protocol promises to keep within the bound too.
	FleetSize int
}

// Span is when a node is up: made (hybrid.New) at Join, closed at Leave. A
// node whose Leave is the scenario's Duration stays to the end and is
// closed at quiescence.
type Span struct{ Join, Leave time.Duration }

// FaultKind is what happens to Redis mid-scenario.
type FaultKind int

// The faults.
const (
	NoFault FaultKind = iota
	Kill              // SIGKILL at At, restarted empty at Heal
	Pause             // SIGSTOP at At, SIGCONT at Heal
	Slow              // a proxy adds Latency each way from At to Heal
)

// String names the fault: "none", "kill", "pause" or "slow".
func (k FaultKind) String() string {
	return [...]string{"none", "kill", "pause", "slow"}[k]
}

// Fault is the scenario's fault.
type Fault struct {
	Kind     FaultKind
	At, Heal time.Duration
	Latency  time.Duration // Slow only
}

// Pattern is how a key's traffic is shaped.
type Pattern int

// The traffic shapes the scenarios draw from.
const (
	Steady      Pattern = iota // over the limit, spread evenly over the nodes present
	HotNode                    // 90% on one node, which rotates
	OnOff                      // bursts on every node at once, on and off in whole rounds
	Weighted                   // weights from 1 to the capacity
	Stale                      // each node alone on the key in turn, idle, then all at once
	Migrate                    // on one node, then spread over all (around the fault, if any)
	Compliant                  // below a fraction of the limit, spread evenly: never refused
	Churn                      // one of many keys against a small MaxKeys
	Idle                       // touched once or twice: holds a share and state
	Unsupported                // the sliding window log in Async mode: every call must fail
)

var patternNames = [...]string{"steady", "hot-node", "on-off", "weighted", "stale-share", "migrate", "compliant", "key-churn", "idle", "unsupported"}

// String names the pattern as reports show it ("stale-share").
func (p Pattern) String() string { return patternNames[p] }

// Key is one caller key with the limits each of its requests is decided
// under (each limit separately, as a rules engine does).
type Key struct {
	Name    string
	Limits  []limit.Limit
	Pattern Pattern
	// Fraction is, for Compliant keys, the fraction of every limit the
	// traffic conforms to (see Conforms), and Route how it reaches the
	// nodes: "spread" (each request to the next node), "pinned" (one
	// client on one node), "hopping" (all on one node, moving to the next
	// every 50 to 200 ms) or "bursty" (bursts at one instant, each on a
	// node drawn at random).
	Fraction  float64
	Route     string
	MaxWeight int64
}

// Shape names the key's traffic for the report: its pattern, or
// "multi-limit" when several limits decide each of its requests (which is a
// shape of its own, whatever the traffic).
func (k Key) Shape() string {
	if len(k.Limits) > 1 {
		return "multi-limit"
	}
	return k.Pattern.String()
}

// Request is one request offered to the fleet.
type Request struct {
	At   time.Duration
	Node int
	Key  int
	N    int64
}

// decisionBudget bounds the decisions per second a scenario offers, so
// that a 2-core machine keeps up under the race detector.
const decisionBudget = 4000

// Generate draws a scenario from seed.
func Generate(seed int64) *Scenario {
	g := &gen{rng: rand.New(rand.NewPCG(uint64(seed), 0x5eed_f1ee7)), aux: rand.New(rand.NewPCG(uint64(seed), 0xa0c5)), sc: &Scenario{Seed: seed}}
	g.config()
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
	return g.sc
}

type gen struct {
	rng *rand.Rand
	// aux draws what was added to the generator later (a compliant
	// stream's route, FleetSize), so that every scenario drawn before keeps
	// its other draws.
	aux    *rand.Rand
	sc     *Scenario
	budget float64 // decisions left to offer
	rr     []int   // per key: the next node in turn
}

func (g *gen) pick(xs ...int) int { return xs[g.rng.IntN(len(xs))] }

func (g *gen) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(g.rng.Int64N(int64(hi-lo)+1))
}

func (g *gen) config() {
	sc, r := g.sc, g.rng
	switch x := r.IntN(100); {
	case x < 76:
		sc.Mode = hybrid.Async
	case x < 88:
		sc.Mode = hybrid.Sync
	default:
		sc.Mode = hybrid.LocalOnly
	}
	sc.Interval = time.Duration(g.pick(5, 10, 10, 20, 20, 50)) * time.Millisecond
	sc.RTT = 10 * time.Millisecond
	nodes := 2 + r.IntN(7)
	if sc.Mode == hybrid.LocalOnly {
		nodes = 1 + r.IntN(4)
		sc.Interval = 0
	}
	sc.Duration = g.between(1500*time.Millisecond, 2500*time.Millisecond).Round(100 * time.Millisecond)
	if sc.Mode != hybrid.LocalOnly && r.IntN(100) < 65 {
		f := &sc.Fault
		f.Kind = FaultKind(1 + r.IntN(3))
		sc.Duration = g.between(2200*time.Millisecond, 3000*time.Millisecond).Round(100 * time.Millisecond)
		f.At = g.between(sc.Duration*3/10, sc.Duration*4/10).Round(10 * time.Millisecond)
		f.Heal = f.At + g.between(400*time.Millisecond, 900*time.Millisecond).Round(10*time.Millisecond)
		f.Heal = min(f.Heal, sc.Duration-600*time.Millisecond)
		if f.Kind == Slow {
			lat := []time.Duration{20, 100, 300}
			if sc.Mode == hybrid.Sync {
				lat = lat[1:] // below the Redis timeout, a synchronous node only slows down
			}
			f.Latency = lat[r.IntN(len(lat))] * time.Millisecond
			sc.RTT += 2 * f.Latency
		}
		sc.Fallback = hybrid.Fallback([]int{0, 0, 0, 1, 2}[r.IntN(5)])
	}
	sc.Nodes = make([]Span, nodes)
	for i := range sc.Nodes {
		sc.Nodes[i] = Span{0, sc.Duration}
	}
	// Nodes joining and leaving, away from the fault (a node cannot start
	// while Redis is away, and one leaving then could not report).
	if nodes >= 3 && r.IntN(100) < 30 {
		for _, i := range r.Perm(nodes)[:1+r.IntN(2)] {
			if i == 0 {
				continue // node 0 stays: some patterns start on it
			}
			var at time.Duration
			join := r.IntN(2) == 0
			if join {
				at = g.between(sc.Duration/5, sc.Duration/2)
			} else {
				at = g.between(sc.Duration/2, sc.Duration*85/100)
			}
			at = at.Round(10 * time.Millisecond)
			if f := sc.Fault; f.Kind != NoFault && at > f.At-300*time.Millisecond && at < f.Heal+500*time.Millisecond {
				continue
			}
			if join {
				sc.Nodes[i].Join = at
			} else {
				sc.Nodes[i].Leave = at
			}
		}
	}
	if r.IntN(100) < 25 {
		sc.MaxKeys = g.pick(64, 128, 256)
	}
	if sc.Mode != hybrid.LocalOnly && r.IntN(100) < 30 {
		sc.ActiveWindow = time.Duration(g.pick(200, 300, 500)) * time.Millisecond
	}
	g.budget = decisionBudget * sc.Duration.Seconds()
	if g.aux.IntN(100) >= 30 {
		for _, n := range sc.Nodes {
			if n.Join == 0 {
				sc.FleetSize++
			}
		}
	}
}

// present reports whether node i is up at at.
func (g *gen) present(i int, at time.Duration) bool {
	s := g.sc.Nodes[i]
	return at >= s.Join && at < s.Leave
}

// presentAt returns the nodes up at at.
func (g *gen) presentAt(at time.Duration) []int {
	var out []int
	for i := range g.sc.Nodes {
		if g.present(i, at) {
			out = append(out, i)
		}
	}
	return out
}

func (g *gen) keys() {
	sc, r := g.sc, g.rng
	n := 2 + r.IntN(4)
	for k := 0; k < n && g.budget > 0; k++ {
		g.mainKey(fmt.Sprintf("k%d", k))
	}
	if r.IntN(100) < 50 {
		g.compliantKey(fmt.Sprintf("c%d", len(sc.Keys)))
	}
	if sc.MaxKeys > 0 || r.IntN(100) < 15 {
		g.churnKeys()
	}
	stale := slices.ContainsFunc(sc.Keys, func(k Key) bool { return k.Pattern == Stale })
	if r.IntN(100) < 25 || stale && r.IntN(100) < 60 {
		g.idleKeys() // thousands of them keep a node's sweep from reaching a stale key
	}
	if sc.Mode == hybrid.Async && r.IntN(100) < 15 {
		k := g.addKey(Key{Name: "log", Pattern: Unsupported, Limits: []limit.Limit{g.limitOf(limit.SlidingWindowLog)}, MaxWeight: 1})
		for i := range 10 {
			at := sc.Duration * time.Duration(i) / 10
			if nodes := g.presentAt(at); len(nodes) > 0 {
				g.emit(at, nodes[i%len(nodes)], k, 1)
			}
		}
	}
}

// algorithm draws an algorithm the mode can run.
func (g *gen) algorithm() limit.Algorithm {
	for {
		a := limit.Algorithms[[]int{0, 0, 0, 1, 2, 2, 3, 4, 4}[g.rng.IntN(9)]]
		if a != limit.SlidingWindowLog || g.sc.Mode != hybrid.Async {
			return a
		}
	}
}

// limitOf draws a limit of algorithm a.
func (g *gen) limitOf(a limit.Algorithm) limit.Limit {
	r := g.rng
	switch a {
	case limit.TokenBucket:
		if r.IntN(5) == 0 {
			// A long period: the burst dwarfs what refills within any
			// window the checker looks at, so whatever a fleet admits beyond
			// it shows (the 600/min).
			return limit.PerMinute(int64(g.pick(600, 3000)))
		}
		rate := int64(g.pick(50, 100, 200, 500, 1000))
		period := []time.Duration{time.Second, time.Second, time.Second, 500 * time.Millisecond, 2 * time.Second}[r.IntN(5)]
		burst := []int64{rate, rate, rate / 10, rate / 4, 2 * rate}[r.IntN(5)]
		return limit.Per(rate, period).WithBurst(max(burst, 1))
	case limit.LeakyBucket:
		rate := int64(g.pick(20, 50, 100, 200))
		return limit.Per(rate, time.Second).WithBurst(int64(g.pick(1, 5, 10, int(rate/10)))).WithAlgorithm(a)
	case limit.SlidingWindowLog:
		return limit.Per(int64(g.pick(20, 50, 100, 500)), []time.Duration{500 * time.Millisecond, time.Second}[r.IntN(2)]).
			WithBurst(0).WithAlgorithm(a)
	default:
		if r.IntN(8) == 0 {
			return limit.PerMinute(int64(g.pick(300, 1200))).WithBurst(0).WithAlgorithm(a) // one window for the whole run, or two
		}
		period := []time.Duration{200 * time.Millisecond, 500 * time.Millisecond, time.Second, time.Second, 2 * time.Second}[r.IntN(5)]
		rate := int64(g.pick(20, 50, 100, 500, 1000)) * int64(period) / int64(time.Second)
		return limit.Per(max(rate, 5), period).WithBurst(0).WithAlgorithm(a)
	}
}

// perSecond is a limit's rate per second.
func perSecond(l limit.Limit) float64 { return float64(l.Rate) / l.Period.Seconds() }

// pace is the rate per second that presses on l within a run of a few
// seconds: its rate, or for a long period, its capacity spent over two
// seconds.
func pace(l limit.Limit) float64 { return math.Max(perSecond(l), float64(l.Capacity())/2) }

func (g *gen) addKey(k Key) int {
	g.sc.Keys = append(g.sc.Keys, k)
	g.rr = append(g.rr, 0)
	return len(g.sc.Keys) - 1
}

// emit offers one request, if its node is up then.
func (g *gen) emit(at time.Duration, node, key int, n int64) {
	if at < 0 || at >= g.sc.Duration || !g.present(node, at) {
		return
	}
	g.sc.Requests = append(g.sc.Requests, Request{At: at, Node: node, Key: key, N: n})
	g.budget -= float64(len(g.sc.Keys[key].Limits))
}

// even offers one request to the next node present, in turn.
func (g *gen) even(at time.Duration, key int, n int64) {
	nodes := g.presentAt(at)
	if len(nodes) == 0 {
		return
	}
	g.rr[key]++
	g.emit(at, nodes[g.rr[key]%len(nodes)], key, n)
}

// stream calls each at evenly spaced instants from from to to at rate per
// second, starting at a random phase.
func (g *gen) stream(from, to time.Duration, rate float64, each func(at time.Duration)) {
	if rate <= 0 {
		return
	}
	step := time.Duration(float64(time.Second) / rate)
	if step <= 0 {
		step = 1
	}
	for at := from + time.Duration(g.rng.Int64N(int64(step))); at < to; at += step {
		each(at)
	}
}

// mainKey adds a key over its limit in one of the shapes.
func (g *gen) mainKey(name string) {
	sc, r := g.sc, g.rng
	a := g.algorithm()
	lims := []limit.Limit{g.limitOf(a)}
	pat := []Pattern{Steady, HotNode, OnOff, Weighted, Weighted, Stale, Migrate}[r.IntN(7)]
	if pat == Stale && a != limit.LeakyBucket {
		// Stale shares show when every node spends its whole estimate at
		// once: a capacity the burst below can exhaust, refilling little
		// within the run (the per-minute limit).
		lims[0] = limit.PerMinute(int64(g.pick(100, 200, 300)))
		if a != limit.TokenBucket {
			lims[0] = lims[0].WithBurst(0).WithAlgorithm(a)
		}
	}
	if r.IntN(100) < 25 && pat != Stale {
		// Several limits on one key: of one algorithm differing in rate
		// (endpoint rules sharing a client key), or of several algorithms.
		for range 1 + r.IntN(2) {
			l := lims[0]
			if r.IntN(2) == 0 {
				l = g.limitOf(g.algorithm())
			} else {
				m := int64(g.pick(2, 3, 4))
				l.Rate *= m
				if l.Algorithm.IsBucket() {
					l.Burst = l.Capacity() * m
				}
			}
			lims = append(lims, l)
		}
	}
	ref := lims[0]
	capMin := ref.Capacity()
	for _, l := range lims {
		capMin = min(capMin, l.Capacity())
	}
	k := g.addKey(Key{Name: name, Limits: lims, Pattern: pat, MaxWeight: 1})
	key := &sc.Keys[k]
	rs := pace(ref)
	// Offered requests per second, scaled down to the budget.
	scale := func(rate float64) float64 {
		perS := g.budget / sc.Duration.Seconds() / float64(len(lims))
		return math.Min(rate, math.Max(perS, 20))
	}
	switch pat {
	case Steady:
		g.stream(0, sc.Duration, scale(rs*(1.2+1.8*r.Float64())), func(at time.Duration) { g.even(at, k, 1) })
	case HotNode:
		every := []time.Duration{5 * sc.Interval, 20 * sc.Interval, 250 * time.Millisecond, 500 * time.Millisecond}[r.IntN(4)]
		every = max(every, 50*time.Millisecond)
		g.stream(0, sc.Duration, scale(rs*(1.5+1.5*r.Float64())), func(at time.Duration) {
			nodes := g.presentAt(at)
			if len(nodes) == 0 {
				return
			}
			hot := nodes[int(at/every)%len(nodes)]
			if r.IntN(10) > 0 {
				g.emit(at, hot, k, 1)
			} else {
				g.emit(at, nodes[r.IntN(len(nodes))], k, 1)
			}
		})
	case OnOff:
		round := max(sc.Interval, 10*time.Millisecond)
		on, off := time.Duration(1+r.IntN(4))*round, time.Duration(1+r.IntN(8))*round
		duty := float64(on) / float64(on+off)
		step := time.Duration(float64(time.Second) / (scale(6*rs*duty) / duty))
		for start := time.Duration(0); start < sc.Duration; start += on + off {
			for at := start; at < start+on; at += max(step, time.Microsecond) {
				g.even(at, k, 1)
			}
		}
	case Weighted:
		whole := r.IntN(3) == 0 // every request the whole capacity
		mean := float64(capMin+1) / 2
		if whole {
			mean = float64(capMin)
		}
		key.MaxWeight = capMin
		g.stream(0, sc.Duration, scale(2*rs/mean), func(at time.Duration) {
			n := capMin
			if !whole {
				n = 1 + r.Int64N(capMin)
			}
			g.even(at, k, n)
		})
	case Stale:
		// Each node alone on the key in turn (up to four of them; with a
		// short ActiveWindow, each after the last has stopped counting, so
		// that each gets the key to itself), then idle, then every node at
		// once.
		at := time.Duration(0)
		alone := g.between(80*time.Millisecond, 150*time.Millisecond)
		gap := time.Duration(0)
		if sc.ActiveWindow > 0 {
			gap = sc.ActiveWindow + 50*time.Millisecond
		}
		nodes := g.presentAt(0)
		for _, i := range nodes[:min(len(nodes), 4)] {
			g.stream(at, at+alone, scale(rs), func(t time.Duration) { g.emit(t, i, k, 1) })
			at += alone + gap
		}
		at += g.between(200*time.Millisecond, 600*time.Millisecond)
		for at < sc.Duration {
			burst := g.between(200*time.Millisecond, 400*time.Millisecond)
			g.stream(at, at+burst, scale(math.Max(6*rs, 8*float64(capMin))), func(t time.Duration) { g.even(t, k, 1) })
			at += burst + g.between(200*time.Millisecond, 600*time.Millisecond)
		}
	case Migrate:
		switchAt := sc.Duration / 2
		if sc.Fault.Kind != NoFault {
			switchAt = sc.Fault.At + 50*time.Millisecond
		}
		g.stream(0, sc.Duration, scale(2*rs), func(at time.Duration) {
			if at < switchAt {
				g.emit(at, 0, k, 1)
			} else {
				g.even(at, k, 1)
			}
		})
	}
}

// compliantKey adds a key whose traffic stays at a fraction of its limit,
// spread evenly: generated at 60% of that fraction, so that a driver running
// late on a busy machine still leaves it conforming.
func (g *gen) compliantKey(name string) {
	r := g.rng
	a := g.algorithm()
	l := g.limitOf(a)
	f := []float64{0.2, 0.3, 0.5}[r.IntN(3)]
	n := int64(1)
	heavy := 0.3
	if !l.Algorithm.IsBucket() {
		heavy = 0.1 // a window holds whole requests: keep them a small part of it
	}
	if room := int64(heavy * f * float64(l.Capacity())); room > 1 && r.IntN(3) == 0 {
		n = 1 + r.Int64N(room)
	}
	if l.Algorithm.IsBucket() {
		// Room at f for two requests at once, so a request the driver sends
		// a little late still conforms.
		l.Burst = max(l.Capacity(), int64(math.Ceil(2*float64(n)/f)))
		if l.Algorithm == limit.LeakyBucket && f*perSecond(l) > 20 {
			// The meter has no burst to absorb a late request: leave the
			// driver 30 ms or more between them.
			l.Rate = max(int64(20/f), 1)
		}
	} else if f*float64(l.Rate) < 20 {
		// A window's count is whole requests: at f of a handful, even
		// spacing cannot stay under it in every window.
		l.Rate = int64(math.Ceil(20 / f))
	}
	route := []string{"spread", "pinned", "hopping", "bursty"}[g.aux.IntN(4)]
	if route == "bursty" && l.Algorithm == limit.LeakyBucket {
		route = "pinned" // a meter admits no burst: one request at a time
	}
	k := g.addKey(Key{Name: name, Limits: []limit.Limit{l}, Pattern: Compliant, Fraction: f, Route: route, MaxWeight: n})
	sc := g.sc
	rate := 0.6 * f * perSecond(l) / float64(n)
	switch route {
	case "spread":
		g.stream(0, sc.Duration, rate, func(at time.Duration) { g.even(at, k, n) })
	case "pinned":
		// One client on one node: one that stays the whole run, or now and
		// then one that joins late, from its first moments.
		home, from := 0, time.Duration(0)
		for i, nd := range sc.Nodes {
			if nd.Join > 0 && g.aux.IntN(2) == 0 {
				home, from = i, nd.Join+10*time.Millisecond
				break
			}
		}
		g.stream(from, sc.Duration, rate, func(at time.Duration) { g.emit(at, home, k, n) })
	case "hopping":
		hop := time.Duration([]int{50, 100, 200}[g.aux.IntN(3)]) * time.Millisecond
		g.stream(0, sc.Duration, rate, func(at time.Duration) {
			if nodes := g.presentAt(at); len(nodes) > 0 {
				g.emit(at, nodes[int(at/hop)%len(nodes)], k, n)
			}
		})
	case "bursty":
		// Bursts at one instant, each of 60% of the fraction's capacity (a
		// bucket) or 40% of its count (a window: one burst in a window and
		// one in the window before), each on a node drawn at random, as far
		// apart as the fraction refills them.
		size := int64(0.6 * f * float64(l.Capacity()))
		gap := time.Duration(float64(size) / (0.6 * f * perSecond(l)) * float64(time.Second))
		if !l.Algorithm.IsBucket() {
			size, gap = int64(0.4*f*float64(l.Rate)), 2*l.Period
		}
		size, gap = max(size, n), max(gap, 10*time.Millisecond)
		count := max(size/n, 1)
		g.stream(0, sc.Duration, rate, func(time.Duration) {}) // the draws a spread stream makes, so later keys draw as before
		for at := time.Duration(g.aux.Int64N(int64(gap) + 1)); at < sc.Duration; at += gap + time.Millisecond {
			if nodes := g.presentAt(at); len(nodes) > 0 {
				node := nodes[g.aux.IntN(len(nodes))]
				for range count {
					g.emit(at, node, k, n)
				}
			}
		}
	}
}

// churnKeys adds many keys with small limits, each touched again and again
// in turn: more keys than a small MaxKeys holds.
func (g *gen) churnKeys() {
	sc, r := g.sc, g.rng
	count := 100 + r.IntN(200)
	if sc.MaxKeys > 0 {
		count = min(sc.MaxKeys*(2+r.IntN(2)), 400)
	}
	l := []limit.Limit{limit.Per(5, time.Minute), limit.Per(1, time.Hour), limit.Per(10, time.Minute).WithBurst(3),
		limit.Per(3, time.Minute).WithBurst(0).WithAlgorithm(limit.FixedWindow)}[r.IntN(4)]
	first := len(sc.Keys)
	for i := range count {
		g.addKey(Key{Name: fmt.Sprintf("churn%d", i), Limits: []limit.Limit{l}, Pattern: Churn, MaxWeight: 1})
	}
	rate := math.Min(600+600*r.Float64(), g.budget/sc.Duration.Seconds())
	i := 0
	g.stream(0, sc.Duration, rate, func(at time.Duration) {
		nodes := g.presentAt(at)
		if len(nodes) > 0 {
			g.emit(at, nodes[r.IntN(len(nodes))], first+i%count, 1)
		}
		i++
	})
}

// idleKeys adds keys touched once early by one node, and some once more
// later by another: each holds a share and state the way a real fleet's
// cold keys do.
func (g *gen) idleKeys() {
	sc, r := g.sc, g.rng
	count := min([]int{100, 300, 1000, 3000}[r.IntN(4)], max(100, int(g.budget/1.5)))
	l := limit.PerHour(1)
	for i := range count {
		k := g.addKey(Key{Name: fmt.Sprintf("idle%d", i), Limits: []limit.Limit{l}, Pattern: Idle, MaxWeight: 1})
		at := g.between(0, sc.Duration*2/5)
		nodes := g.presentAt(at)
		if len(nodes) == 0 {
			continue
		}
		first := nodes[r.IntN(len(nodes))]
		g.emit(at, first, k, 1)
		if r.IntN(2) == 0 {
			at = g.between(sc.Duration/2, sc.Duration-time.Millisecond)
			if nodes := g.presentAt(at); len(nodes) > 1 {
				g.emit(at, nodes[(slices.Index(nodes, first)+1+r.IntN(len(nodes)-1))%len(nodes)], k, 1)
			}
		}
	}
}

// Shapes names what the scenario draws on, for the report.
func (sc *Scenario) Shapes() []string {
	var out []string
	seen := map[string]bool{}
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	add(sc.Mode.String())
	if sc.Fault.Kind != NoFault {
		add(sc.Fault.Kind.String() + "/" + sc.Fallback.String())
	}
	for _, k := range sc.Keys {
		add(k.Pattern.String())
		if len(k.Limits) > 1 {
			add("multi-limit")
		}
	}
	for _, n := range sc.Nodes {
		if n.Join > 0 || n.Leave < sc.Duration {
			add("nodes-join-leave")
			break
		}
	}
	if sc.FleetSize == 0 && sc.Mode != hybrid.LocalOnly {
		add("no-fleet-size")
	}
	if sc.MaxKeys > 0 {
		add(fmt.Sprintf("max-keys-%d", sc.MaxKeys))
	}
	return out
}

// String summarises the scenario on one line.
func (sc *Scenario) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %v, %d nodes, %v", sc.Seed, sc.Mode, len(sc.Nodes), sc.Duration)
	if sc.Mode != hybrid.LocalOnly {
		fmt.Fprintf(&b, ", interval %v", sc.Interval)
	}
	if f := sc.Fault; f.Kind != NoFault {
		fmt.Fprintf(&b, ", %v %v–%v", f.Kind, f.At, f.Heal)
		if f.Kind == Slow {
			fmt.Fprintf(&b, " (+%v each way)", f.Latency)
		}
		fmt.Fprintf(&b, " %v", sc.Fallback)
	}
	if sc.MaxKeys > 0 {
		fmt.Fprintf(&b, ", MaxKeys %d", sc.MaxKeys)
	}
	if sc.ActiveWindow > 0 {
		fmt.Fprintf(&b, ", ActiveWindow %v", sc.ActiveWindow)
	}
	if sc.FleetSize == 0 && sc.Mode != hybrid.LocalOnly {
		b.WriteString(", no FleetSize")
	}
	counts := map[Pattern]int{}
	for _, k := range sc.Keys {
		counts[k.Pattern]++
	}
	fmt.Fprintf(&b, ", %d keys (", len(sc.Keys))
	first := true
	for p := range patternNames {
		if c := counts[Pattern(p)]; c > 0 {
			if !first {
				b.WriteString(", ")
			}
			first = false
			fmt.Fprintf(&b, "%d %v", c, Pattern(p))
		}
	}
	fmt.Fprintf(&b, "), %d requests", len(sc.Requests))
	return b.String()
}
