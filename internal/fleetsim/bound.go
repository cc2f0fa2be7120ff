package fleetsim

import "time"

// Jitter is the reconciler's default jitter, which stretches the longest
// interval between a node's rounds.
const Jitter = 0.1

// AsyncBound is the most an Async fleet of nodes nodes may admit within any
// window of w in which the fleet changes at most once, for a limit of rate
// per second with burst, reconciling every interval with round trips of rtt
// (docs/accuracy.md derives it):
//
//	rate·w + burst                                  the limit itself
//	+ burst·(nodes-1)/nodes                         a change of the fleet: one even split counted twice
//	+ rate·(interval·(1+Jitter) + rtt)/nodes        a node that joins before the others divide by one more
//	+ burst·nodes/65536                             even splits rounded to the nearest 1/32768
//
// A node alone has nothing to share: the bound is the limit.
func AsyncBound(rate, burst float64, interval, rtt time.Duration, nodes int, w time.Duration) float64 {
	if nodes <= 1 {
		return Limit(rate, burst, w)
	}
	n := float64(nodes)
	stale := interval.Seconds()*(1+Jitter) + rtt.Seconds()
	return rate*w.Seconds() + burst + burst*(n-1)/n + rate*stale/n + burst*n/65536
}

// Limit is what an exact limiter admits within a window of w: rate·w + burst.
func Limit(rate, burst float64, w time.Duration) float64 { return rate*w.Seconds() + burst }
