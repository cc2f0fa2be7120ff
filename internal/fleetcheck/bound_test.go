package fleetcheck

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/fleetsim"
	"github.com/hybridlimit/hybridlimit/limit"
)

// The exact maxima are what one node admits on its own: LocalOnly, one
// limiter, walked on a manual clock by an adversary that spends as much as
// the algorithm lets it, where it helps most. The most it gets within any
// window must equal ExactMax (the bound is tight), up to the instants the
// walk steps through.

// epoch is a Unix time aligned to every period the tests use.
var epoch = time.Unix(1_800_000_000, 0)

// adversary spends against one LocalOnly limiter on a manual clock and
// records what it gets.
type adversary struct {
	t   *testing.T
	clk *clock.Manual
	l   *hybrid.Limiter
	lim limit.Limit
	got []Event
}

func newAdversary(t *testing.T, lim limit.Limit) *adversary {
	clk := clock.NewManual(epoch)
	l, err := hybrid.New(hybrid.Config{Mode: hybrid.LocalOnly, Clock: clk})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return &adversary{t: t, clk: clk, l: l, lim: lim}
}

// at moves the clock to epoch+d.
func (a *adversary) at(d time.Duration) { a.clk.Set(epoch.Add(d)) }

// spend asks for weight n until refused, and returns how many were admitted.
func (a *adversary) spend(n int64) int {
	count := 0
	for {
		d, err := a.l.AllowN(context.Background(), "k", a.lim, n)
		require.NoError(a.t, err)
		if !d.Allowed {
			return count
		}
		a.got = append(a.got, Event{At: a.clk.Now().Sub(epoch), N: n})
		count++
	}
}

// greedy spends weight n at every step from from until to.
func (a *adversary) greedy(from, to, step time.Duration, n int64) {
	for d := from; d <= to; d += step {
		a.at(d)
		a.spend(n)
	}
}

func TestExactMaxIsReachedAndNeverBeaten(t *testing.T) {
	ws := []time.Duration{0, 5 * time.Millisecond, 10 * time.Millisecond, 95 * time.Millisecond, 250 * time.Millisecond,
		time.Second, 1500 * time.Millisecond, 2 * time.Second, 3 * time.Second}
	cases := []struct {
		name  string
		lim   limit.Limit
		maxW  int64
		drive func(a *adversary)
		// slack is how far below ExactMax the walk may fall: zero where the
		// walk's steps hit the algorithm's every instant.
		slack func(exact int64) int64
	}{
		{
			name: "token bucket: a full burst, then one per interval",
			lim:  limit.PerSecond(100).WithBurst(20),
			drive: func(a *adversary) {
				a.greedy(0, 4*time.Second, time.Millisecond, 1)
			},
		},
		{
			name: "token bucket, weighted: whole bursts never beat it",
			lim:  limit.PerSecond(100).WithBurst(20),
			maxW: 20,
			drive: func(a *adversary) {
				a.greedy(0, 4*time.Second, time.Millisecond, 20)
			},
			slack: func(exact int64) int64 { return 19 }, // whole bursts come 200 ms apart: up to 19 short
		},
		{
			name: "leaky bucket: drained requests, then the heaviest",
			lim:  limit.PerSecond(50).WithBurst(10).WithAlgorithm(limit.LeakyBucket),
			maxW: 10,
			drive: func(a *adversary) {
				a.greedy(0, 4*time.Second, time.Millisecond, 1)
				for d := 4 * time.Second; ; d += time.Millisecond { // the first instant the meter has drained
					a.at(d)
					if a.spend(10) > 0 {
						break
					}
				}
			},
		},
		{
			name: "fixed window: the end of one window, then the start of every next",
			lim:  limit.PerSecond(100).WithBurst(0).WithAlgorithm(limit.FixedWindow),
			drive: func(a *adversary) {
				a.at(time.Second - time.Nanosecond)
				a.spend(1)
				a.greedy(time.Second, 5*time.Second, time.Millisecond, 1)
			},
		},
		{
			name: "fixed window, 300 ms windows",
			lim:  limit.Per(30, 300*time.Millisecond).WithBurst(0).WithAlgorithm(limit.FixedWindow),
			drive: func(a *adversary) {
				a.at(300*time.Millisecond - time.Nanosecond)
				a.spend(1)
				a.greedy(300*time.Millisecond, 5*time.Second, time.Millisecond, 1)
			},
		},
		{
			name: "sliding window counter: a full window at its very end, then all the approximation allows",
			lim:  limit.PerSecond(1000).WithBurst(0).WithAlgorithm(limit.SlidingWindowCounter),
			drive: func(a *adversary) {
				a.at(time.Second - time.Nanosecond)
				a.spend(1)
				a.greedy(time.Second, 5*time.Second, 100*time.Microsecond, 1)
			},
			// Each window ends a request short: the weighted count is rounded
			// up, so the previous window's last request still counts.
			slack: func(exact int64) int64 { return 1 + exact/1000 },
		},
		{
			name: "sliding window log: the rate, again a period later",
			lim:  limit.PerSecond(100).WithBurst(0).WithAlgorithm(limit.SlidingWindowLog),
			drive: func(a *adversary) {
				a.greedy(0, 4*time.Second, time.Millisecond, 1)
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := newAdversary(t, c.lim)
			c.drive(a)
			maxW := max(c.maxW, 1)
			for _, m := range MaxOver(a.got, ws) {
				exact := ExactMax(c.lim.Algorithm, c.lim.Rate, c.lim.Period, c.lim.Burst, maxW, m.W)
				slack := int64(0)
				if c.slack != nil {
					slack = c.slack(exact)
				}
				t.Logf("over %v: %d admitted, ExactMax %d", m.W, m.Admitted, exact)
				assert.LessOrEqual(t, m.Admitted, exact, "over %v: never more than ExactMax", m.W)
				assert.GreaterOrEqual(t, m.Admitted, exact-slack, "over %v: ExactMax %d is reached (slack %d)", m.W, exact, slack)
				// One node alone is exact in every mode's bound too.
				assert.LessOrEqual(t, float64(m.Admitted), Bound(BoundParams{Mode: hybrid.LocalOnly, Algorithm: c.lim.Algorithm,
					Rate: c.lim.Rate, Period: c.lim.Period, Burst: c.lim.Burst, Nodes: 1, MaxWeight: maxW}, m.W))
			}
		})
	}
}

func TestExactMaxByHand(t *testing.T) {
	tb := limit.PerSecond(100).WithBurst(20)
	cases := []struct {
		lim  limit.Limit
		maxW int64
		w    time.Duration
		want int64
	}{
		{tb, 1, 0, 20},
		{tb, 1, 9 * time.Millisecond, 20},
		{tb, 1, 10 * time.Millisecond, 21},
		{tb, 1, time.Second, 120},
		{tb.WithAlgorithm(limit.LeakyBucket), 1, time.Second, 101},
		{tb.WithAlgorithm(limit.LeakyBucket), 20, time.Second, 120},
		{tb.WithAlgorithm(limit.LeakyBucket), 50, time.Second, 120}, // no request weighs more than the capacity
		{limit.PerSecond(100).WithBurst(0).WithAlgorithm(limit.FixedWindow), 1, 0, 100},
		{limit.PerSecond(100).WithBurst(0).WithAlgorithm(limit.FixedWindow), 1, time.Millisecond, 200},
		{limit.PerSecond(100).WithBurst(0).WithAlgorithm(limit.FixedWindow), 1, time.Second, 200},
		{limit.PerSecond(100).WithBurst(0).WithAlgorithm(limit.FixedWindow), 1, 1001 * time.Millisecond, 300},
		{limit.PerSecond(100).WithBurst(0).WithAlgorithm(limit.SlidingWindowCounter), 1, 500 * time.Millisecond, 150},
		{limit.PerSecond(100).WithBurst(0).WithAlgorithm(limit.SlidingWindowCounter), 1, time.Second, 200},
		{limit.PerSecond(100).WithBurst(0).WithAlgorithm(limit.SlidingWindowLog), 1, 999 * time.Millisecond, 100},
		{limit.PerSecond(100).WithBurst(0).WithAlgorithm(limit.SlidingWindowLog), 1, time.Second, 200},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%v over %v", c.lim, c.w), func(t *testing.T) {
			assert.Equal(t, c.want, ExactMax(c.lim.Algorithm, c.lim.Rate, c.lim.Period, c.lim.Burst, c.maxW, c.w))
		})
	}
}

func TestBoundStartsFromAsyncBound(t *testing.T) {
	// The token bucket in Async mode is fleetsim.AsyncBound, but for the
	// exact limiter's integer intervals.
	p := BoundParams{Mode: hybrid.Async, Algorithm: limit.TokenBucket, Rate: 1000, Period: time.Second, Burst: 100,
		Interval: 10 * time.Millisecond, Nodes: 4, MaxWeight: 1, RTT: 10 * time.Millisecond}
	for _, w := range []time.Duration{10 * time.Millisecond, time.Second, 10 * time.Second} {
		assert.InDelta(t, fleetsim.AsyncBound(1000, 100, p.Interval, p.RTT, 4, w), Bound(p, w), 1e-6, "over %v", w)
	}
	// Alone, Async is exact; LocalOnly is a limit per node; a wipe adds a capacity.
	p.Nodes = 1
	assert.InDelta(t, 1100, Bound(p, time.Second), 1e-9)
	p.Nodes, p.Mode = 3, hybrid.LocalOnly
	assert.InDelta(t, 3300, Bound(p, time.Second), 1e-9)
	p.Nodes, p.Mode, p.Wipes = 1, hybrid.Async, 1
	assert.InDelta(t, 1200, Bound(p, time.Second), 1e-9)
	// Sync: a decision may be made a round trip after it was asked for.
	p.Wipes, p.Mode = 0, hybrid.Sync
	assert.InDelta(t, 1110, Bound(p, time.Second), 1e-9)
}
