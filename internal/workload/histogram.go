package workload

import (
	"math/bits"
	"time"
)

// subBuckets is the resolution of a Histogram: 16 buckets per power of
// two, so a quantile is off by at most 1/16 (6%).
const subBuckets = 16

// Histogram counts durations in logarithmic buckets: constant memory,
// quantiles to within 6%. The zero value is empty and usable; it is not
// safe for concurrent use (give each goroutine its own and Merge them).
type Histogram struct {
	counts [64 * subBuckets]int64
	n      int64
	max    time.Duration
}

// bucketOf is the bucket of d.
func bucketOf(d time.Duration) int {
	v := uint64(max(d, 0))
	if v < subBuckets {
		return int(v)
	}
	exp := bits.Len64(v) - 1 // v in [2^exp, 2^(exp+1))
	shift := exp - 4         // 16 = 2^4 sub-buckets
	return (exp-3)*subBuckets + int(v>>shift) - subBuckets
}

// lowerBound is the smallest duration of bucket b.
func lowerBound(b int) time.Duration {
	if b < 2*subBuckets {
		return time.Duration(b)
	}
	exp := b/subBuckets + 3
	sub := b%subBuckets + subBuckets
	return time.Duration(uint64(sub) << (exp - 4))
}

// Record counts d.
func (h *Histogram) Record(d time.Duration) {
	h.counts[bucketOf(d)]++
	h.n++
	h.max = max(h.max, d)
}

// Merge adds o's counts to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// Count is the number of durations recorded.
func (h *Histogram) Count() int64 { return h.n }

// Max is the longest duration recorded.
func (h *Histogram) Max() time.Duration { return h.max }

// Quantile returns the duration at quantile q (0.5, 0.99): the lower bound
// of its bucket, and the maximum for q >= 1. Zero when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	if q >= 1 {
		return h.max
	}
	rank := int64(q * float64(h.n))
	var seen int64
	for b, c := range h.counts {
		seen += c
		if seen > rank {
			return min(lowerBound(b), h.max)
		}
	}
	return h.max
}

// Over counts the durations recorded at or above d (to the bucket).
func (h *Histogram) Over(d time.Duration) int64 {
	var n int64
	for b := bucketOf(d); b < len(h.counts); b++ {
		n += h.counts[b]
	}
	return n
}
