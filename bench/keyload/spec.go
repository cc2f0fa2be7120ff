// Package keyload makes many-keys traffic for a fleet of limiter nodes and
// sends it open-loop: a request stream laid out in advance (which key, which
// node, when), sent at its instants whatever the nodes answer, so that a
// node that keeps its callers waiting shows as latency measured from each
// request's scheduled send time, not as requests that were never sent.
//
// Around the stream it computes what a reader needs to judge a limiter on
// it: the share of requests that are their key's first on their node
// within 10 s and 60 s (a request no memory-speed protocol can answer from
// a share it does not hold yet), and what one exact limiter admits of the
// same requests, key by key, on both sides (admitted beyond it, and short
// of it).
package keyload

import (
	"fmt"
	"math"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/workload"
)

// Routing says which node each request reaches.
type Routing int

const (
	// Random sends each request (each clump) to a node drawn at random: a
	// load balancer that knows nothing of keys.
	Random Routing = iota
	// Pinned sends every request of a key to one node, chosen by a hash of
	// the key: a client pinned to a node by gRPC, Envoy or consistent
	// hashing.
	Pinned
	// RoundRobin sends a key's successive requests (clumps) to the nodes in
	// turn, starting from the node Pinned would choose.
	RoundRobin
)

func (r Routing) String() string {
	switch r {
	case Random:
		return "random"
	case Pinned:
		return "pinned"
	case RoundRobin:
		return "round-robin"
	}
	return fmt.Sprintf("Routing(%d)", int(r))
}

// MaxNodes bounds Spec.Nodes.
const MaxNodes = 255

// Defaults of Spec's zero fields.
const (
	DefaultTick  = time.Millisecond
	DefaultClump = 1
)

// Spec is the traffic of a stream: Rate requests a second offered to the
// whole fleet of Nodes nodes, each request's key drawn from Keys keys with
// Zipf skew Zipf, routed to a node by Routing. Arrivals are laid out in
// batches every Tick (what a request owes to the rate is sent at the next
// tick): the schedule is fixed before anything is sent. The zero value is
// not usable: Nodes, Keys and Rate are required; zero Clump and Tick mean
// their defaults.
type Spec struct {
	Nodes int
	// Keys are named "user:1" (the most asked for) to "user:Keys", as
	// internal/workload names them.
	Keys int
	// Zipf is the skew: the key of rank k (from 1) is drawn in proportion
	// to 1/k^Zipf; 0 is a uniform draw.
	Zipf float64
	// Rate is requests per second, the whole fleet.
	Rate float64
	// Clump is how many requests each draw sends at once, on one key to one
	// node: a client's burst. Zero means 1.
	Clump   int
	Routing Routing
	// Tick is the schedule's resolution. Zero means 1 ms.
	Tick time.Duration
	// Seed seeds the draws (keys, and nodes under Random): one Spec and
	// Seed make one stream.
	Seed uint64
}

// withDefaults checks s and fills its zero fields.
func (s Spec) withDefaults() (Spec, error) {
	switch {
	case s.Nodes < 1 || s.Nodes > MaxNodes:
		return s, fmt.Errorf("keyload: %d nodes: want 1 to %d", s.Nodes, MaxNodes)
	case s.Keys < 1 || s.Keys > workload.MaxKeys:
		return s, fmt.Errorf("keyload: %d keys: want 1 to %d", s.Keys, workload.MaxKeys)
	case !(s.Rate > 0) || math.IsInf(s.Rate, 0):
		return s, fmt.Errorf("keyload: rate %v: want a positive number of requests a second", s.Rate)
	case s.Clump < 0 || s.Tick < 0:
		return s, fmt.Errorf("keyload: negative clump %d or tick %v", s.Clump, s.Tick)
	case s.Routing < Random || s.Routing > RoundRobin:
		return s, fmt.Errorf("keyload: unknown %v", s.Routing)
	}
	if s.Clump == 0 {
		s.Clump = DefaultClump
	}
	if s.Tick == 0 {
		s.Tick = DefaultTick
	}
	return s, nil
}

// pin is the node Pinned sends key k to: a fixed mix of the key's rank, so
// that hot keys land on nodes at random rather than all on the first.
func pin(k int32, nodes int) uint8 {
	x := uint64(k) + 0x9e3779b97f4a7c15 // splitmix64's finaliser
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	return uint8(x % uint64(nodes))
}
