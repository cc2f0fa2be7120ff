package fleetsim

import "time"

// Jitter is the reconciler's default jitter, which stretches the longest
// interval between a node's rounds.
const Jitter = 0.1

// AsyncBound is the most an Async fleet of nodes nodes may admit within any
// window of w, for a limit of rate per second with burst, reconciling every
// interval with round trips of rtt (docs/accuracy.md derives it):
//
//	rate·w + burst                                  the limit itself
//	+ rate·(interval·(1+Jitter) + rtt)·(nodes-1)/nodes   spend not yet seen
//	+ burst·(nodes-1)/nodes                         a key new to nodes whose views of the fleet differ
func AsyncBound(rate, burst float64, interval, rtt time.Duration, nodes int, w time.Duration) float64 {
	n := float64(nodes)
	stale := interval.Seconds()*(1+Jitter) + rtt.Seconds()
	return rate*w.Seconds() + burst + rate*stale*(n-1)/n + burst*(n-1)/n
}

// Limit is what an exact limiter admits within a window of w: rate·w + burst.
func Limit(rate, burst float64, w time.Duration) float64 { return rate*w.Seconds() + burst }
