package sharesim

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/storemodel"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/share"
)

// BenchmarkSpreadDemand runs one key of 10/s, burst 10, over 4 nodes, its
// requests arriving at random instants (Poisson) at a rate from half the
// limit to ten times it, each to a node drawn at random (W1's routing) or,
// skewed, 70% to one node: what the share protocol costs the store per
// request, in simulated time. It reports ops/request (the store's work),
// admitted/s against the limit's 10 (exactness over the limit: an exact
// limiter admits 10 a second), and the share of decisions that waited on
// the store (waited: served by it, or refused by its answer to their ask;
// not those the node refused alone, told by an earlier answer). The run is deterministic: one iteration tells all; b.N
// repeats it.
//
//	go test ./internal/sharesim -run '^$' -bench SpreadDemand -benchtime 1x
func BenchmarkSpreadDemand(b *testing.B) {
	lim := limit.Per(10, time.Second).WithBurst(10).Canonical()
	for _, rate := range []float64{5, 12, 20, 40, 100} {
		for _, skew := range []float64{0, 0.7} {
			b.Run(fmt.Sprintf("rate=%g/skew=%g", rate, skew), func(b *testing.B) { benchSpread(b, 4, 1, lim, rate, skew) })
		}
	}
}

// BenchmarkPooledDemand is BenchmarkSpreadDemand for a per-client key of
// 1/s, burst 1, over 6 nodes (pooled: one request weighs more than an even
// split), at rates from half its limit to ten times it: the per-client
// workload of make bench-keys, whose random routing Async must serve no
// worse than Sync (one op a request, a request never waiting longer).
func BenchmarkPooledDemand(b *testing.B) {
	lim := limit.PerSecond(1).WithBurst(1).Canonical()
	for _, rate := range []float64{0.5, 1, 2, 10} {
		for _, skew := range []float64{0, 0.7} {
			b.Run(fmt.Sprintf("rate=%g/skew=%g", rate, skew), func(b *testing.B) { benchSpread(b, 6, 1, lim, rate, skew) })
		}
	}
}

// BenchmarkPerClientDemand is BenchmarkPooledDemand with 60 such keys at
// once, each at the rate given, skewed to a node of its own (key i to node
// i mod 6): a node's estimate of how often its homes are called away
// unused (a home is made on a key's first request, as for a client pinned
// to the node) learns from many keys, as in the per-client workloads of
// make bench-keys, where one key could not teach it.
func BenchmarkPerClientDemand(b *testing.B) {
	lim := limit.PerSecond(1).WithBurst(1).Canonical()
	for _, rate := range []float64{0.2, 0.5, 1, 2} {
		for _, skew := range []float64{0, 0.7, 1} {
			b.Run(fmt.Sprintf("rate=%g/skew=%g", rate, skew), func(b *testing.B) { benchSpread(b, 6, 60, lim, rate, skew) })
		}
	}
}

// benchSpread runs spreadScenario on four seeds and reports what it cost
// and what it admitted after the fleet's first two seconds, and how many
// decisions the store answered or made wait past AskWait (late).
func benchSpread(b *testing.B, nodes, keys int, lim limit.Limit, rate, skew float64) {
	var ops, requests, decisions, admitted, exact, waited int64
	var kinds opKinds
	for range b.N {
		ops, requests, decisions, admitted, exact, waited, kinds = 0, 0, 0, 0, 0, 0, opKinds{}
		for seed := int64(1); seed <= 4; seed++ {
			sc := spreadScenario(seed, nodes, keys, lim, rate, skew)
			for k := range sc.Keys {
				exact += exactAdmits(sc.Requests, k, lim, 2*time.Second)
			}
			rec := RunOn(sc, &kindStore{ModelStore: ModelStore{Model: storemodel.New(share.Duration(sc.ActiveWindow))}, kinds: &kinds})
			ops += rec.Ops
			requests += int64(len(sc.Requests))
			for _, d := range rec.Decisions {
				if d.At < 2*time.Second { // the fleet's first two seconds: its start
					continue
				}
				decisions++
				if d.Allowed {
					admitted++
				}
				if d.Source == Remote && (d.Allowed || d.At > d.First) {
					waited++ // served by the store, or refused by its answer after asking (not refused alone)
				}
			}
		}
	}
	b.ReportMetric(float64(ops)/float64(requests), "ops/request")
	b.ReportMetric(float64(admitted)/4/8, "admitted/s")
	b.ReportMetric(float64(exact)/4/8, "exact/s")
	b.ReportMetric(100*float64(waited)/float64(decisions), "%waited")
	for _, k := range []struct {
		name string
		n    int
	}{{"asks", kinds.ask}, {"serves", kinds.serve}, {"gives", kinds.give}, {"renewals", kinds.renew}, {"calls", kinds.call}} {
		b.ReportMetric(float64(k.n)/float64(requests), k.name+"/request")
	}
}

// spreadScenario is one run of the benchmarks above: 10 s, nodes nodes, the
// default interval (20 ms), keys keys under lim, each at rate, skew of each
// key's requests to a node of its own (key i to node i mod nodes).
func spreadScenario(seed int64, nodes, keys int, lim limit.Limit, rate, skew float64) *Scenario {
	r := rand.New(rand.NewPCG(uint64(seed), 7))
	sc := &Scenario{Seed: seed, Interval: 20 * time.Millisecond, AskWait: 40 * time.Millisecond, Lease: time.Second,
		ActiveWindow: time.Second, Duration: 10 * time.Second, FleetSize: nodes}
	sc.Nodes = make([]Node, nodes)
	for i := range sc.Nodes {
		sc.Nodes[i].Leave = sc.Duration
	}
	for k := range keys {
		name := "k"
		if keys > 1 {
			name = fmt.Sprintf("k%d", k)
		}
		sc.Keys = append(sc.Keys, Key{Name: name, Limits: []limit.Limit{lim}, Routing: Random, Fraction: rate / perSecond(lim), Weight: 1})
		for at := time.Duration(r.ExpFloat64() / rate * float64(time.Second)); at < sc.Duration; at += time.Duration(r.ExpFloat64() / rate * float64(time.Second)) {
			node := r.IntN(len(sc.Nodes))
			if r.Float64() < skew {
				node = k % nodes
			}
			sc.Requests = append(sc.Requests, Request{At: at, Node: node, Key: k, N: 1})
		}
	}
	slices.SortStableFunc(sc.Requests, func(a, b Request) int { return cmp.Compare(a.At, b.At) })
	return sc
}

// exactAdmits is how many of key's requests among reqs (weight 1, in time
// order) one exact token bucket of lim admits from from on, having seen
// every request before.
func exactAdmits(reqs []Request, key int, lim limit.Limit, from time.Duration) int64 {
	t := lim.Period / time.Duration(lim.Rate) // the emission interval
	tau := time.Duration(lim.Capacity()) * t
	var tat time.Duration
	n := int64(0)
	for _, r := range reqs {
		if r.Key != key {
			continue
		}
		next := max(tat, r.At) + t
		if next-r.At > tau {
			continue
		}
		tat = next
		if r.At >= from {
			n++
		}
	}
	return n
}

// opKinds counts ops by what they carried: a request waiting (ask: grown;
// serve: the pool admits it), share given back, a lease renewed (and
// anything else: joins, growth before a request is short), and the asks
// answered Call.
type opKinds struct{ ask, serve, give, renew, call int }

// kindStore is the model store, counting the ops it applies by kind.
type kindStore struct {
	ModelStore
	kinds *opKinds
}

func (k *kindStore) Ops(now int64, node string, set share.Settings, ops []share.Op, replies []share.Reply) {
	k.ModelStore.Ops(now, node, set, ops, replies)
	for i, op := range ops {
		switch {
		case op.Want > 0 && op.Serve:
			k.kinds.serve++
		case op.Want > 0:
			k.kinds.ask++
		case op.Held > op.Keep:
			k.kinds.give++
		default:
			k.kinds.renew++
		}
		if replies[i].Outcome == share.Call {
			k.kinds.call++
		}
	}
}
