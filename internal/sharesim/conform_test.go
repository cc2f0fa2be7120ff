package sharesim

import (
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/limit"
)

// TestExactAdmitsWhatOneLimiterAdmits walks the standard through the
// traffic at the edge of each algorithm: a burst of the whole capacity at
// one instant (admitted whole, one more refused), the limit's rate exactly
// after it, a window's count exactly.
func TestExactAdmitsWhatOneLimiterAdmits(t *testing.T) {
	at := func(d time.Duration) int64 { return base + int64(d) }
	tests := []struct {
		name string
		lim  limit.Limit
		reqs []time.Duration // each of weight 1
		want int             // admitted
	}{
		{"token bucket: the whole capacity at once", limit.Per(300, time.Second), repeat(0, 300), 300},
		{"token bucket: one more than the capacity", limit.Per(300, time.Second), repeat(0, 301), 300},
		{"token bucket: 3/s, burst 3, then the rate exactly", limit.Per(3, time.Second),
			append(repeat(0, 3), third, 2*third, 3*third), 6},
		{"token bucket: the rate exactly, a nanosecond early", limit.Per(3, time.Second),
			append(repeat(0, 3), third-1), 3},
		{"leaky bucket: one at a time, at the rate", limit.Per(10, time.Second).WithAlgorithm(limit.LeakyBucket),
			[]time.Duration{0, 100 * time.Millisecond, 199 * time.Millisecond, 300 * time.Millisecond}, 3},
		{"fixed window: the count exactly in each window", limit.Per(5, time.Second).WithBurst(0).WithAlgorithm(limit.FixedWindow),
			append(repeat(0, 6), repeat(time.Second, 5)...), 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newExact(tt.lim.Canonical())
			got := 0
			for _, r := range tt.reqs {
				if e.admit(at(r), 1) {
					got++
				}
			}
			if got != tt.want {
				t.Errorf("admitted %d of %d, want %d", got, len(tt.reqs), tt.want)
			}
		})
	}
}

// third is 3/s's interval as the library computes it (rounded up).
var third = limit.Per(3, time.Second).Interval()

func repeat(at time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = at
	}
	return out
}
