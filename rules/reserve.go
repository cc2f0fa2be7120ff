package rules

import (
	"math"
	"math/bits"

	"github.com/hybridlimit/hybridlimit/limit"
)

// reserveScale is the resolution of the priority reserve: a reserve is
// applied in parts per billion, so that 0.2 scales 100 to exactly 80 rather
// than to the 79 that 100×(1−0.2) gives in binary floating point.
const reserveScale = 1_000_000_000

// reserveKeep is the part of every limit, in parts per billion, that normal
// traffic may use: 1 − reserve.
func reserveKeep(reserve float64) int64 {
	if math.IsNaN(reserve) || reserve <= 0 {
		return reserveScale
	}
	if reserve >= 1 {
		return 0
	}
	return reserveScale - int64(math.Round(reserve*reserveScale))
}

// scaleLimit returns l with its rate and burst scaled by keep parts per
// billion, rounded down, at least 1. A zero burst (meaning the rate) stays
// zero, so it follows the scaled rate.
func scaleLimit(l limit.Limit, keep int64) limit.Limit {
	l.Rate = scaleCount(l.Rate, keep)
	if l.Burst > 0 {
		l.Burst = scaleCount(l.Burst, keep)
	}
	return l
}

func scaleCount(n, keep int64) int64 {
	if n <= 0 {
		return n
	}
	hi, lo := bits.Mul64(uint64(n), uint64(keep))
	q, _ := bits.Div64(hi, lo, reserveScale) // hi < reserveScale: keep <= reserveScale
	return max(int64(q), 1)
}
