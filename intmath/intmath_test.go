package intmath

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMulSat(t *testing.T) {
	assert.Equal(t, int64(6), MulSat(2, 3))
	assert.Equal(t, int64(0), MulSat(0, math.MaxInt64))
	assert.Equal(t, int64(MaxCost), MulSat(1<<40, 1<<40))
	assert.Equal(t, int64(MaxCost), MulSat(MaxCost, 2))
}

// TestWeightedMatchesBigInt checks the 128-bit arithmetic against math/big
// over random values spanning the whole range.
func TestWeightedMatchesBigInt(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 10000 {
		period := 1 + r.Int64N(1<<52)
		elapsed := r.Int64N(period)
		prev, curr := r.Int64N(1<<62), r.Int64N(1<<62)
		if r.IntN(2) == 0 {
			prev, curr = r.Int64N(1000), r.Int64N(1000)
		}
		num := new(big.Int).Mul(big.NewInt(prev), big.NewInt(period-elapsed))
		num.Add(num, new(big.Int).Mul(big.NewInt(curr), big.NewInt(period)))
		q, m := new(big.Int).DivMod(num, big.NewInt(period), new(big.Int))
		if m.Sign() != 0 {
			q.Add(q, big.NewInt(1))
		}
		assert.Equal(t, q.Int64(), Weighted(prev, curr, elapsed, period), "prev %d curr %d elapsed %d period %d", prev, curr, elapsed, period)
	}
}

func TestMulDivFloor(t *testing.T) {
	assert.Equal(t, int64(17250), MulDivFloor(23, 60000, 80, 1<<62))
	assert.Equal(t, int64(100), MulDivFloor(1<<62, 1<<62, 1, 100), "a quotient beyond 64 bits is capped")
	assert.Equal(t, int64(7), MulDivFloor(10, 10, 3, 7))
}

// TestSlidingRetryIsTheFirstFittingInstant checks SlidingRetry against a
// brute-force scan of the instants at which the weighted count fits.
func TestSlidingRetryIsTheFirstFittingInstant(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 2000 {
		period := int64(100 + r.IntN(200))
		elapsed := r.Int64N(period)
		prev, curr := r.Int64N(50), r.Int64N(50)
		room := r.Int64N(50)
		want := int64(-1)
		for d := int64(0); d <= 2*period; d++ {
			e := elapsed + d
			var w int64
			switch {
			case e < period:
				w = Weighted(prev, curr, e, period)
			case e < 2*period:
				w = Weighted(curr, 0, e-period, period)
			default:
				w = 0
			}
			if w <= room {
				want = d
				break
			}
		}
		assert.Equal(t, want, SlidingRetry(prev, curr, elapsed, period, room), "prev %d curr %d elapsed %d period %d room %d", prev, curr, elapsed, period, room)
	}
}
