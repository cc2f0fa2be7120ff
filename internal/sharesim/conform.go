package sharesim

import (
	"time"

	"github.com/hybridlimit/hybridlimit/internal/fleetcheck"
	"github.com/hybridlimit/hybridlimit/limit"
)

// margin is how far the checker lets a node's view of a request's time
// stray from the store's: the network's jitter between the nodes and the
// store, and the alignment of their clocks. Compliant traffic is traffic
// one exact limiter admits whole even with each request's time off by
// margin, either way: no distributed limiter can tell two requests apart in
// time more finely than it knows their times.
const margin = 2 * time.Millisecond

// conforms reports whether reqs (in send order) conform to lim with margin
// m: every request admitted by one exact limiter of lim's algorithm even
// when its time is off by up to m.
func conforms(lim limit.Limit, reqs []fleetcheck.Timed, m time.Duration) bool {
	if len(reqs) == 0 {
		return true
	}
	switch lim.Algorithm {
	case limit.TokenBucket, limit.LeakyBucket:
		t := float64(lim.Period) / float64(lim.Rate)
		tau := float64(lim.Capacity()) * t
		tat := float64(reqs[0].Unix) - 1e18
		for _, r := range reqs {
			now := float64(r.Unix)
			start := max(tat, now)
			cost := float64(r.N) * t
			if lim.Algorithm == limit.TokenBucket && start+cost-now > tau-float64(m)+1e-6 {
				return false
			}
			if lim.Algorithm == limit.LeakyBucket && start > now-float64(m)+1e-6 {
				return false
			}
			tat = start + cost
		}
		return true
	case limit.FixedWindow:
		p := int64(lim.Period)
		counts := map[int64]int64{}
		for _, r := range reqs {
			for w := (r.Unix - int64(m)) / p; w <= (r.Unix+int64(m))/p; w++ {
				counts[w] += r.N
				if counts[w] > lim.Rate {
					return false
				}
			}
		}
		return true
	case limit.SlidingWindowCounter:
		for _, shift := range []time.Duration{-m, m} {
			shifted := make([]fleetcheck.Timed, len(reqs))
			for i, r := range reqs {
				shifted[i] = fleetcheck.Timed{Unix: r.Unix + int64(shift), N: r.N}
			}
			if ok, _, _ := fleetcheck.Conforms(lim, 1, shifted); !ok {
				return false
			}
		}
		return true
	}
	ok, _, _ := fleetcheck.Conforms(lim, 1, reqs)
	return ok
}
