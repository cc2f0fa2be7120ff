package fleetcheck

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/hybridlimit/hybridlimit/limit"
)

// at spaces n requests of weight w every step from the aligned epoch plus
// offset.
func at(offset, step time.Duration, count int, w int64) []Timed {
	out := make([]Timed, count)
	for i := range out {
		out[i] = Timed{Unix: epoch.Add(offset + time.Duration(i)*step).UnixNano(), N: w}
	}
	return out
}

func TestConforms(t *testing.T) {
	ms := time.Millisecond
	tb := limit.PerSecond(100).WithBurst(20)
	fw := limit.PerSecond(100).WithBurst(0).WithAlgorithm(limit.FixedWindow)
	cases := []struct {
		name  string
		lim   limit.Limit
		f     float64
		reqs  []Timed
		ok    bool
		first int
	}{
		// Token bucket at half: 50/s, burst 10.
		{"token bucket: even at the fraction", tb, 0.5, at(0, 20*ms, 100, 1), true, -1},
		{"token bucket: a burst of f·B", tb, 0.5, at(0, 0, 10, 1), true, -1},
		{"token bucket: one more than f·B", tb, 0.5, at(0, 0, 11, 1), false, 10},
		{"token bucket: weighted, even", tb, 0.5, at(0, 100*ms, 20, 5), true, -1},
		{"token bucket: heavier than f·B", tb, 0.5, at(0, time.Second, 1, 11), false, 0},
		// 1 ms of debt per request, against a tolerance of 10 intervals
		// (200 ms) of which the request's own takes 20 ms: request 181 is over.
		{"token bucket: steady, a little fast", tb, 0.5, at(0, 19*ms, 300, 1), false, 181},
		// Leaky bucket at half: one every 20 ms, weight 2 drains in 40 ms.
		{"leaky bucket: every 20 ms", tb.WithAlgorithm(limit.LeakyBucket), 0.5, at(0, 20*ms, 50, 1), true, -1},
		{"leaky bucket: weight 2 every 40 ms", tb.WithAlgorithm(limit.LeakyBucket), 0.5, at(0, 40*ms, 50, 2), true, -1},
		{"leaky bucket: 19 ms apart", tb.WithAlgorithm(limit.LeakyBucket), 0.5, at(0, 19*ms, 50, 1), false, 1},
		// Fixed window at 30%: 30 per aligned second.
		{"fixed window: 30 in a second", fw, 0.3, at(0, 33*ms, 30, 1), true, -1},
		{"fixed window: 31 in a second", fw, 0.3, at(0, 32*ms, 31, 1), false, 30},
		{"fixed window: 30 each side of a boundary", fw, 0.3, at(910*ms, 3*ms, 60, 1), true, -1},
		// Sliding window counter at 30%: 30 at the end of one window weigh
		// on the next.
		{"sliding counter: 25 a second, evenly", fw.WithAlgorithm(limit.SlidingWindowCounter), 0.3, at(0, 40*ms, 90, 1), true, -1},
		// Every 33 ms puts a 31st request in the first second.
		{"sliding counter: every 33 ms", fw.WithAlgorithm(limit.SlidingWindowCounter), 0.3, at(0, 33*ms, 90, 1), false, 30},
		{"sliding counter: 30 each side of a boundary", fw.WithAlgorithm(limit.SlidingWindowCounter), 0.3, at(910*ms, 3*ms, 60, 1), false, 30},
		// Sliding window log at 30%: 30 within any (t−1s, t].
		{"sliding log: 30, then 30 a second later", fw.WithAlgorithm(limit.SlidingWindowLog), 0.3,
			append(at(0, 0, 30, 1), at(time.Second, 0, 30, 1)...), true, -1},
		{"sliding log: 30, then one a little less than a second later", fw.WithAlgorithm(limit.SlidingWindowLog), 0.3,
			append(at(0, 0, 30, 1), at(time.Second-ms, 0, 1, 1)...), false, 30},
		{"nothing sent", tb, 0.2, nil, true, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ok, first, why := Conforms(c.lim, c.f, c.reqs)
			assert.Equal(t, c.ok, ok, why)
			assert.Equal(t, c.first, first, why)
			if !ok {
				assert.NotEmpty(t, why)
			}
		})
	}
	ok, _, why := Conforms(tb, 1.5, at(0, 0, 1, 1))
	assert.False(t, ok)
	assert.Contains(t, why, "outside (0, 1]")
}

// The compliant keys the generator makes conform, as scheduled, to the
// fraction they state: a refusal of them is the limiter's fault, never the
// generator's.
func TestGeneratedCompliantTrafficConforms(t *testing.T) {
	checked := 0
	routes := map[string]int{}
	for seed := int64(1); seed <= 300; seed++ {
		sc := Generate(seed)
		for k, key := range sc.Keys {
			if key.Pattern != Compliant {
				continue
			}
			routes[key.Route]++
			var reqs []Timed
			for _, r := range sc.Requests {
				if r.Key == k {
					reqs = append(reqs, Timed{Unix: epoch.Add(r.At).UnixNano() + 123_456_789, N: r.N})
				}
			}
			for _, lim := range key.Limits {
				ok, first, why := Conforms(lim, key.Fraction, reqs)
				assert.True(t, ok, "seed %d %s: request %d: %s", seed, key.Name, first, why)
				// And with room to spare for a driver running late: at 80% of
				// the fraction too.
				ok, first, why = Conforms(lim, key.Fraction*0.8, reqs)
				assert.True(t, ok, "seed %d %s at 80%% of the fraction: request %d: %s", seed, key.Name, first, why)
				checked++
			}
		}
	}
	assert.Greater(t, checked, 100)
	for _, route := range []string{"spread", "pinned", "hopping", "bursty"} {
		assert.Positive(t, routes[route], "no compliant key is %s", route)
	}
}
