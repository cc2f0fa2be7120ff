package sharesim

import (
	"strings"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
)

// handRecord is a record of one node deciding key 0 under lim: count
// requests of weight 1 sent at each of at, the ones listed in refused
// refused, every one decided at once at the instant it was sent (as the
// node saw it: no clock error).
func handRecord(lim limit.Limit, at []time.Duration, count int, refused map[int]bool) *Record {
	sc := &Scenario{Seed: 1, Interval: 20 * time.Millisecond, AskWait: 40 * time.Millisecond, Lease: time.Second,
		ActiveWindow: time.Second, Duration: 3 * time.Second, Nodes: []Node{{Leave: 3 * time.Second}},
		Keys: []Key{{Name: "k", Limits: []limit.Limit{lim}, Routing: Sticky, Fraction: 1, Weight: 1}}}
	rec := &Record{Scenario: sc}
	for _, t := range at {
		for range count {
			i := len(sc.Requests)
			sc.Requests = append(sc.Requests, Request{At: t, Key: 0, N: 1})
			rec.Decisions = append(rec.Decisions, Decision{Req: i, Sent: t, Seen: t, First: t, At: t, N: 1, Allowed: !refused[i]})
		}
	}
	return rec
}

// A burst of the whole capacity on one node at one instant is judged, and
// one request of it refused is a violation: the margin the check had before
// (each request's time off by 2 ms either way) left every such burst out.
func TestAPinnedBurstOfTheWholeCapacityIsJudged(t *testing.T) {
	lim := limit.PerSecond(10)
	res := Check(handRecord(lim, []time.Duration{100 * time.Millisecond, 1200 * time.Millisecond}, 10, map[int]bool{14: true}))
	if res.Compliant != 20 || res.Refused != 1 || len(res.Violations) != 1 {
		t.Fatalf("judged %d, refused %d, violations %v; want 20 judged, 1 refused, 1 violation", res.Compliant, res.Refused, res.Violations)
	}
	b := res.Coverage.Bursts["sticky token_bucket"]
	if b == nil || b.Whole != 2 || b.WholeJudged != 2 {
		t.Fatalf("bursts %+v: want 2 of the whole capacity, both judged whole", b)
	}
	// Admitted whole: no violation.
	if res := Check(handRecord(lim, []time.Duration{100 * time.Millisecond}, 10, nil)); res.Failed() || res.Compliant != 10 {
		t.Fatalf("a burst of the capacity admitted whole: %v, %d judged", res.Violations, res.Compliant)
	}
}

// A burst one over the capacity is over the limit: which of its requests a
// fleet refuses is not the check's business (the edge of the limit), nor
// anything within a refill after it.
func TestABurstOverTheCapacityIsNotJudged(t *testing.T) {
	lim := limit.PerSecond(10)
	res := Check(handRecord(lim, []time.Duration{100 * time.Millisecond, 600 * time.Millisecond}, 11, map[int]bool{3: true, 15: true}))
	if res.Failed() || res.Compliant != 0 {
		t.Fatalf("judged %d, violations %v; want none judged", res.Compliant, res.Violations)
	}
	ex := res.Coverage.Excluded
	var edge, over int
	for why, n := range ex {
		switch {
		case strings.HasPrefix(why, "at the edge"):
			edge += n
		case strings.HasPrefix(why, "over the limit"):
			over += n
		}
	}
	// The first burst's 10 at its edge, its 11th over; the second burst
	// within a refill of it.
	if edge != 10 || over != 12 {
		t.Fatalf("left out %v; want 10 at the edge and 12 over the limit", ex)
	}
}

// Requests sent within a fault of the store are fed to the standard but not
// judged; those around a join are judged.
func TestDisturbancesLeaveOutFaultsNotJoins(t *testing.T) {
	lim := limit.PerSecond(10)
	rec := handRecord(lim, []time.Duration{100 * time.Millisecond, 2900 * time.Millisecond}, 5, map[int]bool{0: true, 7: true})
	sc := rec.Scenario
	sc.Lease, sc.ActiveWindow = 200*time.Millisecond, 200*time.Millisecond // the pause's span ends 2.6 s after it
	sc.Faults = []Fault{{Kind: Pause, From: 80 * time.Millisecond, To: 200 * time.Millisecond}}
	sc.Nodes = append(sc.Nodes, Node{Join: 2850 * time.Millisecond, Leave: 3 * time.Second})
	res := Check(rec)
	if res.Compliant != 5 || res.Refused != 1 || res.Coverage.Excluded["store pause"] != 5 {
		t.Fatalf("judged %d, refused %d, left out %v; want the 5 around the join judged (1 refused), the 5 in the pause left out", res.Compliant, res.Refused, res.Coverage.Excluded)
	}
	if !strings.Contains(res.Violations[0], "around a join") {
		t.Fatalf("violation %q does not say it was around a join", res.Violations[0])
	}
}

// The generator sends every routing, fault and change of the fleet, and
// every node bursting the whole capacity at one instant.
func TestTheGeneratorSendsEverything(t *testing.T) {
	var cov Coverage
	allAtOnce := 0
	for seed := int64(1); seed <= 400; seed++ {
		sc := Generate(seed)
		cov.sent(sc)
		for k, key := range sc.Keys {
			if key.Routing != AllAtOnce {
				continue
			}
			// The first instant of its traffic: every node up gets a
			// burst of the capacity.
			var first []Request
			for _, r := range sc.Requests {
				if r.Key == k && (len(first) == 0 || r.At == first[0].At) {
					first = append(first, r)
				}
			}
			nodes := map[int]int64{}
			for _, r := range first {
				nodes[r.Node] += r.N
			}
			if len(first) > 0 && len(nodes) == len(sc.up(first[0].At)) {
				allAtOnce++
			}
		}
	}
	for r := range Routing(len(routingNames)) {
		if cov.Keys[r] == 0 {
			t.Errorf("no key is %v", r)
		}
	}
	for _, e := range []string{"store kill", "store pause", "store slow", "store flush", "store evict", "store partition",
		"store restarted empty twice", "a node joins late (FleetSize set)", "a node joins late (no FleetSize)",
		"a fleet starts together (FleetSize set)", "a fleet starts together (no FleetSize)",
		"a node leaves", "a node crashes", "a node pauses", "a node's clock steps", "a key reset under load"} {
		if cov.Events[e] == 0 {
			t.Errorf("no scenario has %q", e)
		}
	}
	if allAtOnce == 0 {
		t.Error("no key has every node bursting at once")
	}
}
