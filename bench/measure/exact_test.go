package measure

import (
	"testing"
	"time"
)

func TestExactAdmits(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(offsets ...time.Duration) []time.Time {
		ts := make([]time.Time, len(offsets))
		for i, o := range offsets {
			ts[i] = t0.Add(o)
		}
		return ts
	}
	burst := func(n int, o time.Duration) []time.Duration {
		ds := make([]time.Duration, n)
		for i := range ds {
			ds[i] = o
		}
		return ds
	}
	every := func(n int, step time.Duration) []time.Duration {
		ds := make([]time.Duration, n)
		for i := range ds {
			ds[i] = time.Duration(i) * step
		}
		return ds
	}
	for _, tc := range []struct {
		name        string
		rate, burst int64
		at          []time.Time
		want        int64
	}{
		{"nothing sent", 100, 100, nil, 0},
		{"a burst of the burst", 100, 100, at(burst(100, 0)...), 100},
		{"four bursts at once", 100, 100, at(burst(400, 0)...), 100},
		{"a token back 10 ms later", 100, 100, at(append(burst(101, 0), 10*time.Millisecond)...), 101},
		{"not quite a token back", 100, 100, at(append(burst(101, 0), 10*time.Millisecond-1)...), 100},
		{"refilled after a full refill", 100, 100, at(append(burst(150, 0), burst(150, time.Second)...)...), 200},
		{"out of order", 100, 100, at(append([]time.Duration{time.Second}, burst(150, 0)...)...), 101},
		{"4x the rate for 1 s: burst + rate", 10, 10, at(every(40, 25*time.Millisecond)...), 10 + 9},
		{"under the rate: all", 10, 1, at(every(20, 100*time.Millisecond)...), 20},
	} {
		if got := ExactAdmits(tc.rate, tc.burst, tc.at); got != tc.want {
			t.Errorf("%s: admitted %d, want %d", tc.name, got, tc.want)
		}
	}
}
