package local

import (
	"math"
	"math/bits"
)

// Share is the fraction of a global limit this node may spend, in units of
// 1/ShareOne. A node alone (or a local-only limiter) has ShareOne; in a fleet
// the reconciler sets each key's share from the node's recent demand, and
// degraded mode sets it to one over the number of active nodes.
//
// Every entry holds the node's estimate of the global state of its key, and
// counts its own spending 1/share times: spending one token of a quarter
// share tells the node that the fleet, spending alike, has used four. So the
// node's allowance is its share of what the estimate says remains.
type Share uint16

// ShareOne is the whole limit.
const ShareOne Share = 1 << 15

// ShareOf returns the share of num out of den, at least 1/ShareOne and at most
// ShareOne. A zero or negative den gives ShareOne.
func ShareOf(num, den float64) Share {
	if den <= 0 || math.IsNaN(num) || math.IsNaN(den) {
		return ShareOne
	}
	s := math.Round(num / den * float64(ShareOne))
	switch {
	case s < 1:
		return 1
	case s >= float64(ShareOne):
		return ShareOne
	}
	return Share(s)
}

// ShareAmong returns an equal share among nodes (ShareOne for nodes <= 1).
func ShareAmong(nodes int) Share {
	if nodes <= 1 {
		return ShareOne
	}
	return ShareOf(1, float64(nodes))
}

// Fraction returns s as a number in (0, 1].
func (s Share) Fraction() float64 { return float64(s) / float64(ShareOne) }

// scaledInterval is the emission interval interval/share, rounded up so a
// node never spends faster than its share.
func scaledInterval(interval int64, s Share) int64 {
	if s >= ShareOne || s == 0 {
		return interval
	}
	hi, lo := bits.Mul64(uint64(interval), uint64(ShareOne))
	q, r := bits.Div64(hi, lo, uint64(s))
	if r != 0 {
		q++
	}
	return int64(q)
}

// rescale converts a scaled count from share from to share to, keeping the
// global estimate it stands for (count/share) unchanged.
func rescale(count int64, from, to Share) int64 {
	if from == to || count <= 0 || from == 0 {
		return count
	}
	hi, lo := bits.Mul64(uint64(count), uint64(to))
	q, _ := bits.Div64(hi, lo, uint64(from))
	return int64(q)
}
