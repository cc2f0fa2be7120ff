package fleetcheck_test

import (
	"fmt"
	"time"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/fleetcheck"
	"github.com/hybridlimit/hybridlimit/limit"
)

// The most one exact limiter admits within a second, per algorithm, at 100
// per second (burst 20 for the buckets).
func ExampleExactMax() {
	for _, a := range limit.Algorithms {
		burst := int64(20)
		if !a.IsBucket() {
			burst = 0
		}
		fmt.Printf("%-22v %d\n", a, fleetcheck.ExactMax(a, 100, time.Second, burst, 1, time.Second))
	}
	// Output:
	// token_bucket           120
	// leaky_bucket           101
	// fixed_window           200
	// sliding_window_log     200
	// sliding_window_counter 200
}

// The bound a fleet of four Async nodes is held to over one second, against
// what one exact limiter admits.
func ExampleBound() {
	p := fleetcheck.BoundParams{Mode: hybrid.Async, Algorithm: limit.TokenBucket, Rate: 1000, Period: time.Second,
		Burst: 100, Interval: 10 * time.Millisecond, Nodes: 4, MaxWeight: 1, RTT: 10 * time.Millisecond}
	fmt.Printf("exact %d, bound %.2f\n", fleetcheck.ExactMax(p.Algorithm, p.Rate, p.Period, p.Burst, 1, time.Second), fleetcheck.Bound(p, time.Second))
	// Output:
	// exact 1100, bound 1180.26
}

// The most admitted within any window of 10 ms: the window [5 ms, 15 ms].
func ExampleMaxOver() {
	ms := time.Millisecond
	events := []fleetcheck.Event{{At: 0, N: 1}, {At: 5 * ms, N: 2}, {At: 12 * ms, N: 3}, {At: 30 * ms, N: 1}}
	m := fleetcheck.MaxOver(events, []time.Duration{10 * ms})[0]
	fmt.Println(m.Admitted, m.At)
	// Output:
	// 5 5ms
}

// A seed names a whole scenario.
func ExampleGenerate() {
	fmt.Println(fleetcheck.Generate(5))
	fmt.Println(fleetcheck.ReplayCommand(5))
	// Output:
	// seed 5: async, 4 nodes, 2.4s, interval 50ms, 1 keys (1 on-off), 4804 requests
	// go test ./internal/fleetcheck -run TestReplay -seed=5 -v
}
