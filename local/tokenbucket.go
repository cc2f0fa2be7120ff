package local

import (
	"time"

	"github.com/hybridlimit/hybridlimit/intmath"
	"github.com/hybridlimit/hybridlimit/limit"
)

// The token bucket is GCRA: the state is the theoretical arrival time (TAT),
// the instant at which the bucket would be full again. A request of weight n
// is admitted when moving the TAT n emission intervals ahead keeps it within
// the burst tolerance of now. Refill needs no arithmetic of its own: time
// passing is the refill, so nothing fractional is ever rounded away.
//
// State words: st[0] is the TAT (Unix ns); st[1] caches the emission interval
// scaled by the entry's share (0 means "recompute"); st[2] is when the latest
// admitted request acts (Unix ns), which cancelling a reservation needs
// (reserve.go).
//
// Under a share s the interval grows to T/s while the tolerance stays
// Burst×T, so the node's allowance is s times the estimate's remaining and
// refills at s times the rate (see Share).

// gcraInterval returns the share-scaled emission interval, caching it in st[1].
func gcraInterval(st *[3]int64, p *policy, s Share) int64 {
	if st[1] == 0 {
		st[1] = scaledInterval(p.interval, s)
	}
	return st[1]
}

// tokenBucket decides a request of weight n at now into res.
func tokenBucket(res *limit.Result, st *[3]int64, now int64, p *policy, n int64, s Share) {
	t := gcraInterval(st, p, s)
	tau := p.tolerance
	tat := max(st[0], now)
	cost := intmath.MulSat(n, t)
	newTAT := tat + cost
	// A request heavier than this node's share of the burst could never fit:
	// it is admitted when the node's allowance is full, into debt, rather
	// than never. With the whole share nothing within capacity is heavy.
	heavy := cost > tau
	allowed := newTAT-now <= tau || (heavy && tat == now)
	res.Allowed = allowed
	switch {
	case allowed:
		st[0] = newTAT
		st[2] = now
		tat = newTAT
	case heavy:
		res.RetryAfter = time.Duration(tat - now)
	default:
		res.RetryAfter = time.Duration(newTAT - tau - now)
	}
	res.Remaining = remainingTokens(now, tat, tau, t)
	res.ResetAfter = time.Duration(max(tat-now, 0))
}

// remainingTokens is how many unit requests this node would admit at now:
// (now + tau - tat) / t, with t the share-scaled interval. Under a share it is
// the node's allowance, not the fleet's: a caller told it may send Remaining
// more requests to this node is not refused for the first of them.
func remainingTokens(now, tat, tau, interval int64) int64 {
	room := now + tau - tat
	if room <= 0 {
		return 0
	}
	return room / interval
}

// seedTAT sets a bucket's state from the global TAT plus this node's spend
// that the global state does not hold yet, counted at the share's interval.
func seedTAT(st *[3]int64, p *policy, s Share, globalTAT, pending int64) {
	st[1] = 0
	st[0] = globalTAT + intmath.MulSat(pending, gcraInterval(st, p, s))
}
