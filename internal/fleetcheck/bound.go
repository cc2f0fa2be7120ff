package fleetcheck

import (
	"time"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/fleetsim"
	"github.com/hybridlimit/hybridlimit/limit"
)

// BoundParams are what the bound on one (key, limit) depends on.
type BoundParams struct {
	Mode      hybrid.Mode
	Algorithm limit.Algorithm
	Rate      int64
	Period    time.Duration
	// Burst is the buckets' capacity; zero for the window algorithms.
	Burst int64
	// Interval is the fleet's SyncInterval.
	Interval time.Duration
	// Nodes is how many nodes may decide on the key (every node the
	// scenario starts).
	Nodes int
	// MaxWeight is the heaviest request the key is sent.
	MaxWeight int64
	// RTT is the round-trip allowance: a reconciliation round's, and in
	// Sync mode a decision's, including any latency a fault adds, and
	// raised to what the run's rounds took where they ran late
	// (Record.Params).
	RTT time.Duration
	// Wipes is how many times Redis lost its data during the scenario.
	Wipes int
}

// Bound is the most the fleet may admit on one (key, limit), in weight, within
// any closed window of length w. It is the one statement of the bound the
// checker holds the code to; docs/accuracy.md derives it. With C the limit's
// capacity (the burst of the buckets, the rate of the windows), N the nodes,
// I the interval and r the round-trip allowance:
//
//	LocalOnly   N·Exact(w)                    each node is a limiter of its own
//	Async       Exact(w)                      the limit itself (shares add up to at most one)
//	            + C·(N−1)/N                   a change of the fleet: one even split counted twice
//	            + R·(1.1·I + r)/N             a node that joins, before the others see it
//	            + C·wipes                     Redis forgot what was spent before it lost its data
//	            + C·N/65536                   even splits rounded to the nearest 1/32768
//	            (fleetsim.AsyncBound for the token bucket)
//	            (the window algorithms: Exact(w + r), their boundaries placed on
//	            clocks aligned to Redis's within half a round trip each)
//	Sync        Exact(w + r)                  a decision is recorded when its call began and
//	            + R·(1.1·I + r)·(N−1)/N       made in Redis up to a round trip later; then the
//	            + C·(N−1)/N + C·wipes         hand-over to and from degraded mode, whose spend
//	                                          is reported a round later
//
// R is the rate per second. Exact is ExactMax: what one exact limiter of
// the algorithm admits. The weights' maximum enters Exact only through the
// leaky bucket meter (a request passes whole once the previous has
// drained); a fleet that admits a request heavier than its node's share of
// C, unpaid, exceeds this bound, as it should.
//
// What each Fallback must satisfy while degraded: Conservative and
// FailClosed the same bound (FailClosed admits nothing); FailOpen admits
// everything by definition, so its degraded admissions are left out of the
// windows and everything else must stay within the bound.
func Bound(p BoundParams, w time.Duration) float64 {
	if p.Mode == hybrid.LocalOnly {
		return float64(max(p.Nodes, 1)) * float64(ExactMax(p.Algorithm, p.Rate, p.Period, p.Burst, p.MaxWeight, w))
	}
	exactW := w
	if p.Mode == hybrid.Sync || !p.Algorithm.IsBucket() {
		// Sync: a decision is recorded when its call began and made up to
		// a round trip later. Windows: each node places window boundaries
		// on its estimate of Redis's clock, uncertain by half a round trip,
		// so two nodes' windows may be a round trip apart.
		exactW += p.RTT
	}
	n := float64(max(p.Nodes, 1))
	c := float64(capacity(p.Algorithm, p.Rate, p.Burst))
	perSecond := float64(p.Rate) / p.Period.Seconds()
	stale := p.Interval.Seconds()*(1+fleetsim.Jitter) + p.RTT.Seconds()
	if p.Nodes <= 1 {
		return float64(ExactMax(p.Algorithm, p.Rate, p.Period, p.Burst, p.MaxWeight, exactW)) + c*float64(p.Wipes)
	}
	unseen := perSecond * stale / n // Async: a joining node's first round
	if p.Mode == hybrid.Sync {
		unseen = perSecond * stale * (n - 1) / n // degraded spend reported a round late
	}
	rounding := 0.0
	if p.Mode == hybrid.Async {
		rounding = c * n / 65536 // even splits round to the nearest 1/32768 of the limit
	}
	return float64(ExactMax(p.Algorithm, p.Rate, p.Period, p.Burst, p.MaxWeight, exactW)) +
		unseen + c*(n-1)/n + c*float64(p.Wipes) + rounding
}

// ExactMax is the most weight one exact limiter of algorithm alg admits
// within a closed window of length w, for rate per period with burst (the
// buckets' capacity) and requests of at most maxWeight:
//
//   - token bucket: B + ⌊w/T⌋, T the emission interval (Limit.Interval,
//     rounded up): a full bucket at the window's start, then one token
//     every T;
//   - leaky bucket (the meter): ⌊w/T⌋ + maxWeight: a request passes only
//     once everything before it has drained, and then occupies its weight in
//     intervals, so all but the last request of the window fit in w/T
//     intervals and the last may weigh up to the capacity;
//   - fixed window: R·(⌈w/P⌉ + 1): a window of length w touches at most
//     that many aligned windows, each of which may be spent whole at its
//     edge (hence twice the rate across a boundary);
//   - sliding window counter: ⌊R·(1 + w/P)⌋: window k may have admitted
//     by elapsed e at most R − c(k−1)·(1 − e/P), so the tail of one window
//     (c(k−1) ≤ R at its very end), whole windows of R each and the head of
//     the last add up to at most R + R·w/P; the approximation admits up to
//     twice the rate within just under one period;
//   - sliding window log: R·(⌊w/P⌋ + 1): every half-open span of P holds
//     at most R, and a closed window of w is covered by ⌊w/P⌋ + 1 of them.
//
// The test against the local engine shows each is reached.
func ExactMax(alg limit.Algorithm, rate int64, period time.Duration, burst, maxWeight int64, w time.Duration) int64 {
	w = max(w, 0)
	lim := limit.Limit{Rate: rate, Period: period, Burst: burst, Algorithm: alg}
	switch alg {
	case limit.TokenBucket:
		return lim.Capacity() + int64(w/lim.Interval())
	case limit.LeakyBucket:
		return int64(w/lim.Interval()) + min(max(maxWeight, 1), lim.Capacity())
	case limit.FixedWindow:
		return rate * (int64((w+period-1)/period) + 1)
	case limit.SlidingWindowCounter:
		return rate + int64(float64(rate)*float64(w)/float64(period))
	case limit.SlidingWindowLog:
		return rate * (int64(w/period) + 1)
	}
	return 0
}

// capacity is the limit's Capacity, from its parts.
func capacity(alg limit.Algorithm, rate, burst int64) int64 {
	return limit.Limit{Rate: rate, Burst: burst, Algorithm: alg}.Capacity()
}
