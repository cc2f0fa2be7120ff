package keyload

import (
	"math"
	"slices"
	"testing"
	"time"
)

func mustGenerate(t *testing.T, spec Spec, history, warmup, duration time.Duration) *Stream {
	t.Helper()
	s, err := Generate(spec, history, warmup, duration)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The stream offers the rate, on the tick grid, in order, the measured part
// starting at its first request at or after 0; the same Spec and Seed make
// the same stream.
func TestStreamOffersTheRateOnItsSchedule(t *testing.T) {
	spec := Spec{Nodes: 4, Keys: 1000, Zipf: 1.1, Rate: 2000, Seed: 7}
	s := mustGenerate(t, spec, time.Second, 500*time.Millisecond, 2*time.Second)
	if got, want := s.Offered(), 4000; got < want-1 || got > want+1 {
		t.Errorf("measured part offers %d requests, want %d (2,000/s for 2 s)", got, want)
	}
	if got, want := s.Measured, 1000; got < want-1 || got > want+1 {
		t.Errorf("warm-up sends %d, want %d", got, want)
	}
	if s.Requests[s.Measured].At < 0 || s.Requests[s.Measured-1].At >= 0 {
		t.Errorf("measured part begins at index %d: %v after %v", s.Measured, s.Requests[s.Measured].At, s.Requests[s.Measured-1].At)
	}
	if !slices.IsSortedFunc(s.Requests, func(a, b Request) int { return int(a.At - b.At) }) {
		t.Error("requests out of order")
	}
	for _, r := range s.Requests {
		if r.At%time.Millisecond != 0 || r.At < -500*time.Millisecond || r.At >= 2*time.Second || int(r.Node) >= spec.Nodes {
			t.Fatalf("request %+v off the schedule", r)
		}
	}
	if again := mustGenerate(t, spec, time.Second, 500*time.Millisecond, 2*time.Second); !slices.Equal(again.Requests, s.Requests) {
		t.Error("the same spec made another stream")
	}
	spec.Seed++
	if other := mustGenerate(t, spec, time.Second, 500*time.Millisecond, 2*time.Second); slices.Equal(other.Requests, s.Requests) {
		t.Error("another seed made the same stream")
	}
	if s.Names[0] != "user:1" || len(s.Names) != 1000 {
		t.Errorf("names %q... (%d)", s.Names[0], len(s.Names))
	}
}

func TestRouting(t *testing.T) {
	const nodes = 6
	for _, r := range []Routing{Random, Pinned, RoundRobin} {
		s := mustGenerate(t, Spec{Nodes: nodes, Keys: 500, Zipf: 1.2, Rate: 5000, Routing: r, Seed: 1}, 0, 0, 2*time.Second)
		perNode := make([]int, nodes)
		byKey := map[int32][]uint8{}
		for _, q := range s.Requests {
			perNode[q.Node]++
			byKey[q.Key] = append(byKey[q.Key], q.Node)
		}
		switch r {
		case Pinned:
			for k, ns := range byKey {
				if slices.Min(ns) != slices.Max(ns) {
					t.Fatalf("pinned: key %d reached nodes %v", k, ns)
				}
			}
		case RoundRobin:
			for k, ns := range byKey {
				for i := 1; i < len(ns); i++ {
					if ns[i] != (ns[i-1]+1)%nodes {
						t.Fatalf("round-robin: key %d went to node %d after %d", k, ns[i], ns[i-1])
					}
				}
			}
		case Random:
			hot := byKey[0] // the hottest key: about 1,900 requests
			seen := map[uint8]bool{}
			for _, n := range hot {
				seen[n] = true
			}
			if len(seen) != nodes {
				t.Errorf("random: the hottest key reached %d nodes of %d", len(seen), nodes)
			}
		}
		if r != Pinned { // spread: every node its sixth, within 10%
			for n, c := range perNode {
				if want := len(s.Requests) / nodes; math.Abs(float64(c-want)) > 0.1*float64(want) {
					t.Errorf("%v: node %d got %d of %d", r, n, c, len(s.Requests))
				}
			}
		}
	}
}

// A clump is Clump requests on one key to one node at one instant; the rate
// counts requests, not clumps.
func TestClumps(t *testing.T) {
	s := mustGenerate(t, Spec{Nodes: 4, Keys: 100, Rate: 1000, Clump: 10, Routing: Random, Seed: 3}, 0, 0, time.Second)
	if s.Offered() != 1000 {
		t.Errorf("offered %d, want 1,000", s.Offered())
	}
	for i := 0; i < len(s.Requests); i += 10 {
		c := s.Requests[i : i+10]
		for _, r := range c {
			if r != c[0] {
				t.Fatalf("clump at %d: %+v and %+v", i, c[0], r)
			}
		}
	}
}

// The first-request figures, one key on one node by hand: it is first
// within a window when the node had no request of it in the window before;
// in the run's figure, a request before the warm-up does not count.
func TestTrackerCountsFirstRequests(t *testing.T) {
	s := time.Second
	tr := newTracker(2, 2, -100*s, -20*s) // the stream begins at -100 s, the warm-up at -20 s
	for _, r := range []Request{
		{At: -90 * s, Key: 0, Node: 0}, // history
		{At: -25 * s, Key: 0, Node: 0}, // history, 5 s before the warm-up
		{At: 5 * s, Key: 0, Node: 0},   // 30 s after: first within 10 s; within 60 s only in the run
		{At: 10 * s, Key: 0, Node: 0},  // 5 s after: not first
		{At: 10 * s, Key: 0, Node: 1},  // another node: first
		{At: 20 * s, Key: 0, Node: 0},  // exactly 10 s after: first within 10 s
		{At: 20 * s, Key: 0, Node: 0},  // the same instant (a clump): not first
		{At: 21 * s, Key: 1, Node: 0},  // a new key: first
		{At: -10 * s, Key: 1, Node: 1}, // warm-up, out of the count
	} {
		tr.see(r)
	}
	want := Firsts{Requests: 6, InRun: [2]int64{4, 3}, Steady: [2]int64{4, 2}}
	if tr.f != want {
		t.Errorf("got %+v, want %+v", tr.f, want)
	}
}

// The generator's steady-state figure matches the arithmetic: under a
// uniform draw a key arrives at a node as a Poisson stream of rate λ (the
// rate over keys and nodes), and a request is its key's first within w with
// probability e^(−λw).
func TestSteadyFirstsMatchPoisson(t *testing.T) {
	const keys, nodes, rate = 2000, 2, 200.0
	s := mustGenerate(t, Spec{Nodes: nodes, Keys: keys, Rate: rate, Seed: 5}, time.Minute, 0, 30*time.Second)
	lambda := rate / keys / nodes // 0.05 a second
	for i, w := range Windows {
		want := math.Exp(-lambda * w.Seconds())
		if got := s.Firsts.Share(s.Firsts.Steady[i]); math.Abs(got-want) > 0.02 {
			t.Errorf("window %v: steady share %.3f, want %.3f", w, got, want)
		}
		if s.Firsts.InRun[i] < s.Firsts.Steady[i] {
			t.Errorf("window %v: %d first in the run, fewer than %d in steady state", w, s.Firsts.InRun[i], s.Firsts.Steady[i])
		}
	}
	// A run that sends from 0 meets every key anew: within 60 s, a request
	// at t is first in the run when its key did not reach its node since 0,
	// e^(−λt), on average over 30 s (1 − e^(−30λ)) / 30λ.
	if got, want := s.Firsts.Share(s.Firsts.InRun[1]), (1-math.Exp(-30*lambda))/(30*lambda); math.Abs(got-want) > 0.03 {
		t.Errorf("first within 60 s in a 30 s run: %.3f, want %.3f", got, want)
	}
}

func TestGenerateRejects(t *testing.T) {
	good := Spec{Nodes: 2, Keys: 10, Rate: 10}
	for _, tc := range []struct {
		spec Spec
		d    time.Duration
	}{
		{Spec{Keys: 10, Rate: 10}, time.Second},
		{Spec{Nodes: 256, Keys: 10, Rate: 10}, time.Second},
		{Spec{Nodes: 2, Rate: 10}, time.Second},
		{Spec{Nodes: 2, Keys: 10, Rate: math.NaN()}, time.Second},
		{Spec{Nodes: 2, Keys: 10, Rate: 10, Routing: 7}, time.Second},
		{Spec{Nodes: 2, Keys: 10, Rate: 10, Clump: -1}, time.Second},
		{good, 0},
		{Spec{Nodes: 2, Keys: 10, Rate: 0.1}, time.Second}, // no request in the measured part
	} {
		if _, err := Generate(tc.spec, 0, 0, tc.d); err == nil {
			t.Errorf("%+v for %v: no error", tc.spec, tc.d)
		}
	}
}
