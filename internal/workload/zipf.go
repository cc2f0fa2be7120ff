package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// MaxKeys bounds Config.Keys: the key table and the Zipf table take about
// 40 bytes a key.
const MaxKeys = 10_000_000

// Zipf draws key ranks 0..n-1, rank k with probability proportional to
// 1/(k+1)^s. s = 0 is a uniform draw; s need not exceed 1 (math/rand's Zipf
// requires it). A Zipf is read-only once made and safe for concurrent use;
// each caller brings its own random source.
type Zipf struct {
	cdf []float64 // cdf[k] is the weight of ranks 0..k, cdf[n-1] == 1
	s   float64
}

// NewZipf returns the distribution of n ranks with exponent s.
func NewZipf(n int, s float64) (*Zipf, error) {
	if n < 1 || n > MaxKeys {
		return nil, fmt.Errorf("workload: %d keys: want 1 to %d", n, MaxKeys)
	}
	if s < 0 || math.IsNaN(s) || math.IsInf(s, 0) {
		return nil, fmt.Errorf("workload: zipf exponent %v: want 0 (uniform) or more", s)
	}
	cdf := make([]float64, n)
	sum := 0.0
	for k := range cdf {
		sum += math.Pow(float64(k+1), -s)
		cdf[k] = sum
	}
	for k := range cdf {
		cdf[k] /= sum
	}
	cdf[n-1] = 1
	return &Zipf{cdf: cdf, s: s}, nil
}

// Draw returns a rank drawn with r.
func (z *Zipf) Draw(r *rand.Rand) int {
	u := r.Float64() // [0, 1): rank k owns [cdf[k-1], cdf[k])
	return sort.Search(len(z.cdf)-1, func(i int) bool { return z.cdf[i] > u })
}

// P returns the probability of rank k.
func (z *Zipf) P(k int) float64 {
	if k < 0 || k >= len(z.cdf) {
		return 0
	}
	if k == 0 {
		return z.cdf[0]
	}
	return z.cdf[k] - z.cdf[k-1]
}

// Keys returns the number of ranks.
func (z *Zipf) Keys() int { return len(z.cdf) }

// Over returns how many ranks are offered more than limit per second when
// rate requests per second are drawn: the keys an exact limiter denies.
func (z *Zipf) Over(rate, limit float64) int {
	n := 0
	for k := range z.cdf {
		if z.P(k)*rate <= limit {
			break // probabilities fall with the rank
		}
		n++
	}
	return n
}
