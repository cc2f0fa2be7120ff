package fleetcheck

import (
	"fmt"
	"math"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
)

// Conforms reports whether reqs (in time order) are compliant with lim at
// fraction f, and if not, the index of the first request that is not and
// why. The checker promises compliant traffic that it is never refused,
// across outages included.
//
// Traffic is compliant at fraction f of a limit when every one of its
// requests, at the time it was decided and with its weight, would be
// admitted by one exact limiter of the same algorithm and period at f of the
// limit: rate f·R and, for the buckets, burst f·B. Precisely, for requests
// (tᵢ, nᵢ) in time order:
//
//   - token bucket: GCRA with emission interval T_f = P/(f·R) and tolerance
//     f·B·T_f = B·P/R: admitted when max(tat, tᵢ) + nᵢ·T_f − tᵢ ≤ B·P/R,
//     after which tat = max(tat, tᵢ) + nᵢ·T_f; tat starts in the past (a full
//     bucket). So no request may weigh more than f·B.
//   - leaky bucket (meter): admitted when tat ≤ tᵢ (everything before it has
//     drained at f·R), after which tat = tᵢ + nᵢ·T_f.
//   - fixed window: the requests of each window aligned to the Unix epoch
//     weigh at most f·R in all.
//   - sliding window counter: at elapsed e into aligned window k,
//     c(k−1)·(P−e)/P + c(k) + nᵢ ≤ f·R, with c the weight counted so far in
//     each window (the same approximation, at f·R).
//   - sliding window log: the requests within (tᵢ − P, tᵢ] weigh at most f·R,
//     tᵢ's own included.
//
// "Spread evenly" is how the scenarios send it (each request to the next
// node present, in turn), not part of the definition: the promise is about
// what the client sends, whatever node it reaches. Times are the decisions'
// own (Unix ns on the machine that runs Redis), so a stream the driver
// delivered late is judged as delivered, and only if it still conforms.
func Conforms(lim limit.Limit, f float64, reqs []Timed) (ok bool, first int, why string) {
	if f <= 0 || f > 1 {
		return false, 0, fmt.Sprintf("fraction %v outside (0, 1]", f)
	}
	if len(reqs) == 0 {
		return true, -1, ""
	}
	rate := f * float64(lim.Rate)
	period := float64(lim.Period)
	const eps = 1e-6 // ns: float rounding, far below any clock's resolution
	t0 := reqs[0].Unix
	switch lim.Algorithm {
	case limit.TokenBucket, limit.LeakyBucket:
		tf := period / rate
		tau := float64(lim.Capacity()) * float64(lim.Period) / float64(lim.Rate)
		tat := math.Inf(-1)
		for i, r := range reqs {
			t := float64(r.Unix - t0)
			start := math.Max(tat, t)
			cost := float64(r.N) * tf
			if lim.Algorithm == limit.TokenBucket && start+cost-t > tau+eps {
				return false, i, fmt.Sprintf("token bucket at %.2f of %v: weight %d needs %v more room", f, lim, r.N, time.Duration(start+cost-t-tau))
			}
			if lim.Algorithm == limit.LeakyBucket && start > t+eps {
				return false, i, fmt.Sprintf("leaky bucket at %.2f of %v: %v before the previous request drained", f, lim, time.Duration(start-t))
			}
			tat = start + cost
		}
	case limit.FixedWindow, limit.SlidingWindowCounter:
		p := int64(lim.Period)
		win, cur, prev := reqs[0].Unix/p, 0.0, 0.0
		for i, r := range reqs {
			w := r.Unix / p
			switch {
			case w == win+1:
				prev, cur = cur, 0
			case w > win+1:
				prev, cur = 0, 0
			}
			win = w
			used := cur
			if lim.Algorithm == limit.SlidingWindowCounter {
				elapsed := float64(r.Unix - w*p)
				used += prev * (period - elapsed) / period
			}
			if used+float64(r.N) > rate+eps {
				return false, i, fmt.Sprintf("%v at %.2f of %v: %.1f counted, weight %d over %.1f", lim.Algorithm, f, lim, used, r.N, rate)
			}
			cur += float64(r.N)
		}
	case limit.SlidingWindowLog:
		var in int64 // weight of reqs[from:i]
		from := 0
		for i, r := range reqs {
			for from < i && reqs[from].Unix+int64(lim.Period) <= r.Unix {
				in -= reqs[from].N
				from++
			}
			if float64(in+r.N) > rate+eps {
				return false, i, fmt.Sprintf("sliding window log at %.2f of %v: %d within the period, weight %d over %.1f", f, lim, in, r.N, rate)
			}
			in += r.N
		}
	default:
		return false, 0, fmt.Sprintf("unknown algorithm %v", lim.Algorithm)
	}
	return true, -1, ""
}

// Timed is a request as decided: when (Unix ns) and its weight.
type Timed struct {
	Unix int64
	N    int64
}
