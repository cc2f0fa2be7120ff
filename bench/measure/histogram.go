// Package measure holds the comparison's instruments: a latency histogram
// that records without allocating, a go-redis hook that counts what each
// client sends, Redis's own INFO commandstats, a parallel load generator and
// a fleet driver that offers a rate to N nodes and counts admissions.
package measure

import (
	"math/bits"
	"time"
)

// subBits is the number of mantissa bits kept per power of two: 64 buckets
// per octave, so a recorded value is within 1/64 (1.6%) of the true one.
const subBits = 6

// Histogram is a log-linear latency histogram in nanoseconds. The zero value
// is ready; it is not safe for concurrent use (give each goroutine its own
// and Merge them).
type Histogram struct {
	counts [64 << subBits]uint64
	n      uint64
	max    int64
}

func bucketOf(ns int64) int {
	if ns < 1 {
		ns = 1
	}
	v := uint64(ns)
	exp := bits.Len64(v) - 1 // v in [2^exp, 2^(exp+1))
	if exp < subBits {
		return int(v) // exact below 2^subBits
	}
	mant := (v >> (exp - subBits)) & (1<<subBits - 1)
	return (exp-subBits+1)<<subBits | int(mant)
}

// lowerOf is the smallest value of bucket b.
func lowerOf(b int) int64 {
	if b < 1<<subBits {
		return int64(b)
	}
	exp := b>>subBits + subBits - 1
	mant := uint64(b & (1<<subBits - 1))
	return int64((1<<subBits | mant) << (exp - subBits))
}

// Record adds one latency.
func (h *Histogram) Record(d time.Duration) {
	ns := int64(d)
	h.counts[bucketOf(ns)]++
	h.n++
	if ns > h.max {
		h.max = ns
	}
}

// Merge adds o's counts to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// Count is the number of values recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Quantile returns the value at quantile q in [0, 1]: the midpoint of the
// bucket holding it (the maximum for q = 1).
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	if q >= 1 {
		return time.Duration(h.max)
	}
	rank := uint64(q*float64(h.n)) + 1
	var seen uint64
	for b, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := lowerOf(b), lowerOf(b+1)
			return time.Duration(min((lo+hi)/2, h.max))
		}
	}
	return time.Duration(h.max)
}
