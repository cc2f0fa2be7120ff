// Package intmath is the integer arithmetic the local engine and the Redis
// client share, so that a decision reads the same whichever made it: exact
// 128-bit products for the sliding window counter, and saturating products
// for time in state. No floats. It imports nothing of the module: it is the
// bottom of the core.
package intmath

import "math/bits"

// MaxCost bounds a product of time in state: added to any Unix time in ns
// before the year 2116 it still fits in an int64.
const MaxCost = 1 << 62

// MulSat is a*b for non-negative a and b, saturated at MaxCost. It is on the
// decision path, so it multiplies wide instead of dividing to check.
func MulSat(a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > MaxCost {
		return MaxCost
	}
	return int64(lo)
}

// MulDivFloor returns min(floor(a×b/c), limit) for non-negative a, b and
// positive c, without overflow.
func MulDivFloor(a, b, c, limit int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return limit
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	return min(int64(q), limit)
}

// Weighted is the sliding window counter's count at elapsed into the current
// window: ceil((prev×(period-elapsed) + curr×period) / period), exact.
// 0 <= elapsed < period; prev and curr are non-negative.
func Weighted(prev, curr, elapsed, period int64) int64 {
	hi, lo := bits.Mul64(uint64(prev), uint64(period-elapsed))
	chi, clo := bits.Mul64(uint64(curr), uint64(period))
	lo, carry := bits.Add64(lo, clo, 0)
	hi += chi + carry
	q, r := bits.Div64(hi, lo, uint64(period))
	if r != 0 {
		q++
	}
	return int64(q)
}

// SlidingRetry returns how long from elapsed until the sliding window
// counter's weighted count falls to at most room, if nothing more is counted:
// within this window when the current count alone fits, else within the next,
// where the current count becomes the previous one and decays.
func SlidingRetry(prev, curr, elapsed, period, room int64) int64 {
	if curr <= room {
		// Need prev×(period-e) <= (room-curr)×period, i.e. e >= period - x.
		x := period
		if prev > 0 {
			x = MulDivFloor(room-curr, period, prev, period)
		}
		return max(period-x-elapsed, 0)
	}
	// Next window: need curr×(period-e) <= room×period.
	x := MulDivFloor(room, period, curr, period)
	return period - elapsed + period - x
}
