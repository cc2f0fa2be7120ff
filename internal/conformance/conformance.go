// Package conformance is the one test suite every limiter backend passes: the
// local engine on a manual clock, and Redis on its own clock (a single node
// and a Cluster). Each case states what the algorithm promises, with margins
// a real clock needs and no more: a backend with a manual clock has no slack,
// so there every bound is exact.
package conformance

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/limit"
)

// Backend is a limiter under test.
type Backend interface {
	// AllowN decides a request of weight n for key under lim.
	AllowN(ctx context.Context, key string, lim limit.Limit, n int64) (limit.Result, error)
	// Now is the backend's clock: where its windows start.
	Now() time.Time
	// Wait lets d pass on the backend's clock: a manual clock advances, a
	// real one sleeps.
	Wait(d time.Duration)
	// Slack bounds how far the backend's clock may differ from Now at the
	// moment it decides (a round trip's worth for a real clock). Zero for a
	// manual clock. Time a step takes is measured, not assumed: the cases
	// read Now before and after each step.
	Slack() time.Duration
}

// Run runs every case against fresh backends made by newBackend. Cases run in
// parallel when parallel is set (each on its own keys), which a real clock
// needs to keep the suite short.
func Run(t *testing.T, parallel bool, newBackend func(t *testing.T) Backend) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if parallel {
				t.Parallel()
			}
			c.run(t, newBackend(t))
		})
	}
}

var cases = []struct {
	name string
	run  func(t *testing.T, b Backend)
}{
	{"token bucket: burst then deny", tokenBurst},
	{"token bucket: refill", tokenRefill},
	{"token bucket: peek spends nothing", tokenPeek},
	{"n above capacity is an error", overCapacity},
	{"keys and algorithms are independent", independence},
	{"leaky bucket: one per interval", leakyMeter},
	{"fixed window: count and reset", fixedWindow},
	{"fixed window: the boundary spike", fixedBoundarySpike},
	{"sliding window counter: weighs the previous window", slidingCounter},
	{"sliding window log: exact window", slidingLog},
}

var ctx = context.Background()

func key(t *testing.T) string { return "conf:" + t.Name() }

// allow decides and fails the test on an error.
func allow(t *testing.T, b Backend, k string, lim limit.Limit, n int64) limit.Result {
	t.Helper()
	res, err := b.AllowN(ctx, k, lim, n)
	require.NoError(t, err)
	return res
}

// admitted sends count requests of weight 1 and returns how many passed.
func admitted(t *testing.T, b Backend, k string, lim limit.Limit, count int) int {
	t.Helper()
	got := 0
	for range count {
		if allow(t, b, k, lim, 1).Allowed {
			got++
		}
	}
	return got
}

// within asserts lo <= got <= hi.
func within(t *testing.T, got, lo, hi time.Duration, what string) {
	t.Helper()
	assert.True(t, got >= lo && got <= hi, "%s: %v not within [%v, %v]", what, got, lo, hi)
}

// attempts is how many times a case that depends on where real time falls
// (inside one window, before a boundary) may set its scene again when the
// machine was too slow to keep to it. A wrong result on a scene that held
// fails at once; only a scene that did not hold is tried again.
const attempts = 5

// scene runs a case that returns false when its premise about time did not
// hold, on a fresh key each time, and fails if it never held.
func scene(t *testing.T, run func(k string) bool) {
	t.Helper()
	for i := range attempts {
		if run(fmt.Sprintf("%s#%d", key(t), i)) {
			return
		}
	}
	t.Fatalf("the machine was too slow to keep to the scene %d times in a row", attempts)
}

// sameWindow reports whether a and b fall in one window of period.
func sameWindow(a, b time.Time, period time.Duration) bool {
	return a.UnixNano()/int64(period) == b.UnixNano()/int64(period)
}

// nextWindow waits until offset past the start of the next window of period
// on the backend's clock.
func nextWindow(b Backend, period, offset time.Duration) {
	into := time.Duration(b.Now().UnixNano() % int64(period))
	b.Wait(period - into + offset)
}

// alignTo waits until offset past the start of a window of period on the
// backend's clock, leaving the whole rest of the window to the test.
func alignTo(b Backend, period, offset time.Duration) {
	into := time.Duration(b.Now().UnixNano() % int64(period))
	wait := (period - into + offset) % period
	if wait < offset/2 { // too close to the boundary to trust: take the next window
		wait += period
	}
	b.Wait(wait)
}

func tokenBurst(t *testing.T, b Backend) {
	lim := limit.PerSecond(10).WithBurst(5) // one token per 100 ms
	k := key(t)
	// The bucket refills from the first token spent: after five tokens
	// spent over a while, the sixth request is denied with the next token
	// due 100 ms after the first, less what has refilled since. start is
	// read before the first request is sent, which no scheduler can make
	// late.
	start := b.Now()
	for i := int64(4); i >= 0; i-- {
		res := allow(t, b, k, lim, 1)
		require.True(t, res.Allowed)
		// Under a real clock a few ms may refill nothing yet; the count can
		// only be at least what it would be at a frozen instant.
		assert.GreaterOrEqual(t, res.Remaining, i)
	}
	res := allow(t, b, k, lim, 1)
	if !res.Allowed {
		// The first token was spent at or after start, so the next token is
		// due at most 100 ms from the decision, at least 100 ms less the
		// time since start, and the bucket is full 400 ms after that.
		took := b.Now().Sub(start) + b.Slack()
		within(t, res.RetryAfter, 100*time.Millisecond-took, 100*time.Millisecond, "retry after")
		assert.Equal(t, int64(0), res.Remaining)
		within(t, res.ResetAfter, 500*time.Millisecond-took, 500*time.Millisecond, "reset after")
	} else {
		assert.NotZero(t, b.Slack(), "a frozen clock admits exactly the burst")
	}
}

func tokenRefill(t *testing.T, b Backend) {
	const interval = 50 * time.Millisecond
	lim := limit.PerSecond(20).WithBurst(10) // one token per 50 ms
	k := key(t)
	// The bucket empties somewhere between before and after the burst (a
	// loaded machine may hold the test up after the backend emptied it):
	// refill is counted from before, which no scheduler can make late.
	before := b.Now()
	require.Equal(t, 10, admitted(t, b, k, lim, 12), "the burst, and no more")
	b.Wait(275 * time.Millisecond) // 5.5 tokens' worth
	got := admitted(t, b, k, lim, 10)
	// At least what 275 ms refill; at most what refilled until the last
	// request was decided.
	hi := tokensIn(b.Now().Sub(before)+b.Slack(), interval)
	assert.True(t, got >= 5 && got <= hi, "refilled %d, want 5..%d", got, hi)

	b.Wait(2 * time.Second) // far past full
	start := b.Now()
	got = admitted(t, b, k, lim, 15)
	hi = 10 + tokensIn(b.Now().Sub(start)+b.Slack(), interval)
	assert.True(t, got >= 10 && got <= hi, "refill stops at the burst: %d, want 10..%d", got, hi)
}

// tokensIn is how many whole intervals d spans.
func tokensIn(d, interval time.Duration) int { return int(d / interval) }

func tokenPeek(t *testing.T, b Backend) {
	lim := limit.Per(3, time.Hour) // nothing refills within the test
	k := key(t)
	for range 5 {
		res := allow(t, b, k, lim, 0)
		assert.True(t, res.Allowed)
		assert.Equal(t, int64(3), res.Remaining)
	}
	assert.Equal(t, 3, admitted(t, b, k, lim, 5))
}

func overCapacity(t *testing.T, b Backend) {
	for _, lim := range []limit.Limit{
		limit.PerSecond(10).WithBurst(3),
		limit.PerSecond(10).WithAlgorithm(limit.FixedWindow),
		limit.PerSecond(10).WithAlgorithm(limit.SlidingWindowLog),
	} {
		_, err := b.AllowN(ctx, key(t), lim, lim.Capacity()+1)
		assert.True(t, errors.Is(err, limit.ErrExceedsCapacity), "%v: %v", lim, err)
	}
	_, err := b.AllowN(ctx, key(t), limit.PerSecond(0), 1)
	assert.True(t, errors.Is(err, limit.ErrInvalidLimit), "%v", err)
	_, err = b.AllowN(ctx, "", limit.PerSecond(1), 1)
	assert.True(t, errors.Is(err, limit.ErrInvalidKey), "%v", err)
}

func independence(t *testing.T, b Backend) {
	lim := limit.Per(2, time.Hour)
	k := key(t)
	assert.Equal(t, 2, admitted(t, b, k+":a", lim, 4))
	assert.Equal(t, 2, admitted(t, b, k+":b", lim, 4), "another key has its own bucket")
	assert.Equal(t, 2, admitted(t, b, k+":a", lim.WithAlgorithm(limit.FixedWindow), 4), "another algorithm has its own state")
}

func leakyMeter(t *testing.T, b Backend) {
	lim := limit.PerSecond(5).WithAlgorithm(limit.LeakyBucket) // one per 200 ms
	k := key(t)
	start := b.Now()
	assert.True(t, allow(t, b, k, lim, 1).Allowed)
	res := allow(t, b, k, lim, 1)
	require.False(t, res.Allowed, "no burst: the next waits for the first to drain")
	within(t, res.RetryAfter, 200*time.Millisecond-b.Now().Sub(start)-b.Slack(), 200*time.Millisecond, "retry after")
	b.Wait(res.RetryAfter + b.Slack())
	assert.True(t, allow(t, b, k, lim, 1).Allowed)
}

func fixedWindow(t *testing.T, b Backend) {
	period := 600 * time.Millisecond
	lim := limit.Per(5, period).WithAlgorithm(limit.FixedWindow)
	scene(t, func(k string) bool {
		alignTo(b, period, 100*time.Millisecond+b.Slack())
		start := b.Now()
		got := admitted(t, b, k, lim, 8)
		before := b.Now()
		res := allow(t, b, k, lim, 1)
		after := b.Now()
		if !sameWindow(start, after, period) {
			return false
		}
		assert.Equal(t, 5, got)
		require.False(t, res.Allowed)
		end := windowEnd(before, period)
		within(t, res.RetryAfter, end.Sub(after)-b.Slack(), end.Sub(before)+b.Slack(), "retry after: the window's end")
		b.Wait(res.RetryAfter + b.Slack())
		start = b.Now()
		got = admitted(t, b, k, lim, 8)
		if !sameWindow(start, b.Now(), period) {
			return false
		}
		assert.Equal(t, 5, got, "a new window, a new count")
		return true
	})
}

// windowEnd is the end of the window of period that t falls in.
func windowEnd(t time.Time, period time.Duration) time.Time {
	return time.Unix(0, (t.UnixNano()/int64(period)+1)*int64(period))
}

func fixedBoundarySpike(t *testing.T, b Backend) {
	period := 600 * time.Millisecond
	lim := limit.Per(5, period).WithAlgorithm(limit.FixedWindow)
	scene(t, func(k string) bool {
		alignTo(b, period, period-100*time.Millisecond) // 100 ms before a boundary
		start := b.Now()
		first := admitted(t, b, k, lim, 5)
		end := b.Now()
		b.Wait(windowEnd(end, period).Sub(end) + b.Slack())
		second := admitted(t, b, k, lim, 5)
		if !sameWindow(start, end, period) || sameWindow(end, b.Now(), period) {
			return false
		}
		assert.Equal(t, 10, first+second, "twice the limit within %v", b.Now().Sub(start))
		return true
	})
}

func slidingCounter(t *testing.T, b Backend) {
	period := 600 * time.Millisecond
	lim := limit.Per(10, period).WithAlgorithm(limit.SlidingWindowCounter)
	scene(t, func(k string) bool {
		alignTo(b, period, 50*time.Millisecond+b.Slack())
		start := b.Now()
		got := admitted(t, b, k, lim, 12)
		spent := b.Now()
		// Half-way into the next window the previous count weighs half: 5 of
		// 10 fit. Each further tenth of the window that passes while deciding
		// frees one more.
		nextWindow(b, period, period/2)
		half := b.Now()
		got2 := admitted(t, b, k, lim, 10)
		end := b.Now()
		if !sameWindow(start, spent, period) || !sameWindow(half, end, period) || sameWindow(spent, half, period) ||
			windowEnd(spent, period) != windowEnd(half, period).Add(-period) {
			return false
		}
		assert.Equal(t, 10, got)
		into := func(at time.Time) time.Duration { return time.Duration(at.UnixNano() % int64(period)) }
		lo := 10 - int((10*(period-into(half)+b.Slack())+period-1)/period) // ceil of what still weighs at the start
		hi := 10 - int(10*(period-into(end)-b.Slack())/period)
		assert.True(t, got2 >= lo && got2 <= hi, "admitted %d half-way into the next window, want %d..%d", got2, lo, hi)
		return true
	})
}

func slidingLog(t *testing.T, b Backend) {
	period := 500 * time.Millisecond
	lim := limit.Per(3, period).WithAlgorithm(limit.SlidingWindowLog)
	scene(t, func(k string) bool {
		before := b.Now()
		assert.True(t, allow(t, b, k, lim, 1).Allowed)
		logged := b.Now() // the first request was logged between before and logged
		b.Wait(200 * time.Millisecond)
		pairBefore := b.Now()
		assert.True(t, allow(t, b, k, lim, 2).Allowed)
		asked := b.Now()
		res := allow(t, b, k, lim, 1)
		decided := b.Now()
		if decided.Sub(before) >= period {
			return false // the first request left the window while the scene was set
		}
		require.False(t, res.Allowed)
		// The first request leaves the window period after it was logged.
		within(t, res.RetryAfter, before.Add(period).Sub(decided)-b.Slack(), logged.Add(period).Sub(asked)+b.Slack(), "retry after")
		b.Wait(res.RetryAfter + b.Slack())
		first := allow(t, b, k, lim, 1)
		second := allow(t, b, k, lim, 1)
		if b.Now().Sub(pairBefore) >= period-b.Slack() {
			return false // the pair left the window too
		}
		assert.True(t, first.Allowed, "the first request has left the window")
		assert.False(t, second.Allowed, "the pair logged at 200 ms has not")
		return true
	})
}
