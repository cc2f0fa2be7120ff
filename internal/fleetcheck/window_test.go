package fleetcheck

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestMaxOverByHand(t *testing.T) {
	ms := time.Millisecond
	events := []Event{{At: 30 * ms, N: 1}, {At: 0, N: 2}, {At: 10 * ms, N: 5}, {At: 10 * ms, N: 1}, {At: 25 * ms, N: 3}}
	cases := []struct {
		w        time.Duration
		admitted int64
		at       time.Duration
	}{
		{0, 6, 10 * ms},       // two at 10 ms
		{10 * ms, 8, 0},       // [0, 10]: the window is closed at both ends
		{15 * ms, 9, 10 * ms}, // [10, 25]
		{20 * ms, 10, 10 * ms},
		{time.Hour, 12, 0},
	}
	for _, c := range cases {
		got := MaxOver(slices.Clone(events), []time.Duration{c.w})[0]
		assert.Equal(t, c.admitted, got.Admitted, "over %v", c.w)
		assert.Equal(t, c.at, got.At, "over %v", c.w)
		assert.Equal(t, 4, got.Windows, "one window per distinct admission time")
	}
	assert.Equal(t, []WindowMax{{W: time.Second}}, MaxOver(nil, []time.Duration{time.Second}), "nothing admitted")
}

// bruteMax is the most within any closed window of w, trying every start
// from every event.
func bruteMax(events []Event, w time.Duration) int64 {
	var best int64
	for _, s := range events {
		var sum int64
		for _, e := range events {
			if e.At >= s.At && e.At <= s.At+w {
				sum += e.N
			}
		}
		best = max(best, sum)
	}
	return best
}

func TestMaxOverMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		events := make([]Event, rng.IntN(60))
		for i := range events {
			events[i] = Event{At: time.Duration(rng.IntN(50)) * time.Millisecond, N: 1 + rng.Int64N(5)}
		}
		ws := []time.Duration{0, time.Millisecond, 7 * time.Millisecond, 20 * time.Millisecond, time.Second}
		want := make([]int64, len(ws))
		for i, w := range ws {
			want[i] = bruteMax(events, w)
		}
		for i, got := range MaxOver(events, ws) {
			assert.Equal(t, want[i], got.Admitted, "over %v of %v", ws[i], events)
		}
	}
}
