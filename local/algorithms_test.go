package local

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/limit"
)

// t0 is a window boundary for every period the tests use (a whole hour).
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano()

// at returns t0 + d.
func at(d time.Duration) int64 { return t0 + int64(d) }

// step is one request in a scripted sequence and what it must get back.
type step struct {
	at         time.Duration // since t0
	n          int64
	allowed    bool
	remaining  int64
	retryAfter time.Duration
	resetAfter time.Duration
}

// runSteps plays steps against a fresh engine for one key and checks every
// field of every result.
func runSteps(t *testing.T, lim limit.Limit, steps []step) {
	t.Helper()
	e := newEngine(t, Config{})
	for i, s := range steps {
		res, err := e.AllowN(at(s.at), "k", lim, s.n)
		require.NoError(t, err, "step %d", i)
		assert.Equal(t, s.allowed, res.Allowed, "step %d (at %v, n %d): allowed", i, s.at, s.n)
		assert.Equal(t, s.remaining, res.Remaining, "step %d (at %v): remaining", i, s.at)
		assert.Equal(t, s.retryAfter, res.RetryAfter, "step %d (at %v): retry after", i, s.at)
		assert.Equal(t, s.resetAfter, res.ResetAfter, "step %d (at %v): reset after", i, s.at)
		assert.Equal(t, lim, res.Limit)
	}
}

func newEngine(t testing.TB, cfg Config) *Engine {
	t.Helper()
	e, err := New(cfg)
	require.NoError(t, err)
	return e
}

func TestTokenBucket(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name  string
		lim   limit.Limit
		steps []step
	}{
		{"burst then steady rate", limit.PerSecond(10).WithBurst(3), []step{
			{0, 1, true, 2, 0, 100 * ms},
			{0, 1, true, 1, 0, 200 * ms},
			{0, 1, true, 0, 0, 300 * ms},
			{0, 1, false, 0, 100 * ms, 300 * ms},
			{99 * ms, 1, false, 0, 1 * ms, 201 * ms},
			{100 * ms, 1, true, 0, 0, 300 * ms},
			{150 * ms, 1, false, 0, 50 * ms, 250 * ms},
		}},
		{"refill after idle is capped at the burst", limit.PerSecond(10).WithBurst(3), []step{
			{0, 3, true, 0, 0, 300 * ms},
			{10 * time.Second, 1, true, 2, 0, 100 * ms},
			{10 * time.Second, 2, true, 0, 0, 300 * ms},
			{10 * time.Second, 1, false, 0, 100 * ms, 300 * ms},
		}},
		{"weighted request waits for enough tokens", limit.PerSecond(10).WithBurst(5), []step{
			{0, 4, true, 1, 0, 400 * ms},
			{0, 3, false, 1, 200 * ms, 400 * ms},
			{200 * ms, 3, true, 0, 0, 500 * ms},
		}},
		{"peek spends nothing", limit.PerSecond(10).WithBurst(2), []step{
			{0, 0, true, 2, 0, 0},
			{0, 2, true, 0, 0, 200 * ms},
			{0, 0, true, 0, 0, 200 * ms},
		}},
		{"default burst equals the rate", limit.PerSecond(4), []step{
			{0, 4, true, 0, 0, time.Second},
			{0, 1, false, 0, 250 * ms, time.Second},
		}},
		{"one per day", limit.Per(1, 24*time.Hour), []step{
			{0, 1, true, 0, 0, 24 * time.Hour},
			{23 * time.Hour, 1, false, 0, time.Hour, time.Hour},
			{24 * time.Hour, 1, true, 0, 0, 24 * time.Hour},
		}},
		{"1e9 per second", limit.PerSecond(1_000_000_000).WithBurst(1000), []step{
			{0, 1000, true, 0, 0, 1000},
			{0, 1, false, 0, 1, 1000},
			{500, 500, true, 0, 0, 1000},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { runSteps(t, tc.lim, tc.steps) })
	}
}

func TestLeakyBucketMeter(t *testing.T) {
	ms := time.Millisecond
	lim := limit.PerSecond(10).WithAlgorithm(limit.LeakyBucket)
	runSteps(t, lim, []step{
		{0, 1, true, 0, 0, 100 * ms},
		{0, 1, false, 0, 100 * ms, 100 * ms},
		{50 * ms, 1, false, 0, 50 * ms, 50 * ms},
		{100 * ms, 1, true, 0, 0, 100 * ms},
		{time.Second, 0, true, 1, 0, 0},
		{time.Second, 3, true, 0, 0, 300 * ms}, // a weighted request occupies three intervals
		{time.Second + 200*ms, 1, false, 0, 100 * ms, 100 * ms},
	})
}

func TestLeakyBucketQueue(t *testing.T) {
	ms := time.Millisecond
	lim := limit.PerSecond(10).WithBurst(3).WithAlgorithm(limit.LeakyBucket)
	e := newEngine(t, Config{})
	want := []struct {
		at      time.Duration
		allowed bool
		delay   time.Duration
		retry   time.Duration
	}{
		{0, true, 0, 0},
		{0, true, 100 * ms, 0},
		{0, true, 200 * ms, 0},
		{0, false, 0, 100 * ms}, // three in the queue: full
		{100 * ms, true, 200 * ms, 0},
		{1000 * ms, true, 0, 0},
	}
	for i, w := range want {
		r, err := e.ReserveN(at(w.at), "q", lim, 1, time.Hour)
		require.NoError(t, err)
		assert.Equal(t, w.allowed, r.Allowed, "step %d", i)
		assert.Equal(t, w.delay, r.Delay, "step %d delay", i)
		assert.Equal(t, w.retry, r.RetryAfter, "step %d retry", i)
	}

	// Cancelling the last place gives it back to the queue.
	e2 := newEngine(t, Config{})
	var last limit.Reservation
	for range 3 {
		var err error
		last, err = e2.ReserveN(t0, "q", lim, 1, time.Hour)
		require.NoError(t, err)
	}
	r, _ := e2.ReserveN(t0, "q", lim, 1, time.Hour)
	require.False(t, r.Allowed)
	gave, err := e2.CancelN(t0, "q", lim, 1, last.At+int64(last.Delay))
	require.NoError(t, err)
	assert.True(t, gave)
	r, _ = e2.ReserveN(t0, "q", lim, 1, time.Hour)
	assert.True(t, r.Allowed)
	assert.Equal(t, 200*ms, r.Delay)

	_, err = e.ReserveN(t0, "q", limit.PerSecond(10).WithAlgorithm(limit.FixedWindow), 1, time.Hour)
	assert.ErrorIs(t, err, ErrNotBucket)
	_, err = e.CancelN(t0, "q", limit.PerSecond(10).WithAlgorithm(limit.SlidingWindowCounter), 1, t0)
	assert.ErrorIs(t, err, ErrNotBucket)
}

func TestFixedWindow(t *testing.T) {
	s := time.Second
	lim := limit.PerMinute(5).WithAlgorithm(limit.FixedWindow)
	runSteps(t, lim, []step{
		{0, 3, true, 2, 0, 60 * s},
		{30 * s, 2, true, 0, 0, 30 * s},
		{30 * s, 1, false, 0, 30 * s, 30 * s},
		{60 * s, 1, true, 4, 0, 60 * s},
		{180 * s, 0, true, 5, 0, 0},
	})
}

// TestFixedWindowBoundarySpike shows the fixed window's known weakness: the
// whole rate at the end of one window and again at the start of the next,
// twice the limit within a fraction of the period.
func TestFixedWindowBoundarySpike(t *testing.T) {
	lim := limit.PerMinute(100).WithAlgorithm(limit.FixedWindow)
	e := newEngine(t, Config{})
	admitted := 0
	for _, when := range []time.Duration{59*time.Second + 900*time.Millisecond, 60 * time.Second} {
		for range 100 {
			res, err := e.AllowN(at(when), "spike", lim, 1)
			require.NoError(t, err)
			if res.Allowed {
				admitted++
			}
		}
	}
	assert.Equal(t, 200, admitted, "fixed window admits 2x the limit within 100 ms across a boundary")

	// The sliding window counter, at the same instants, does not.
	sliding := lim.WithAlgorithm(limit.SlidingWindowCounter)
	admitted = 0
	for _, when := range []time.Duration{59*time.Second + 900*time.Millisecond, 60 * time.Second} {
		for range 100 {
			res, err := e.AllowN(at(when), "spike2", sliding, 1)
			require.NoError(t, err)
			if res.Allowed {
				admitted++
			}
		}
	}
	assert.Equal(t, 100, admitted, "the sliding window counter carries the previous window's weight")
}

// TestSlidingWindowCounterWorkedExample pins a worked example:
// previous window 80, current 30, 70% through the window: weighted count
// 80×0.3 + 30 = 54.
func TestSlidingWindowCounterWorkedExample(t *testing.T) {
	lim := limit.PerMinute(100).WithAlgorithm(limit.SlidingWindowCounter)
	e := newEngine(t, Config{})
	_, err := e.AllowN(at(0), "k", lim, 80)
	require.NoError(t, err)
	res, err := e.AllowN(at(102*time.Second), "k", lim, 30) // 70% into the next window
	require.NoError(t, err)
	require.True(t, res.Allowed)
	res, err = e.AllowN(at(102*time.Second), "k", lim, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(100-54), res.Remaining)

	// 46 more fit at that instant, 47 do not; the retry waits for the
	// previous window's weight to fall by one.
	res, _ = e.AllowN(at(102*time.Second), "k", lim, 47)
	assert.False(t, res.Allowed)
	assert.Equal(t, 750*time.Millisecond, res.RetryAfter) // 80 × 0.75 s per request of decay
	res, _ = e.AllowN(at(102*time.Second), "k", lim, 46)
	assert.True(t, res.Allowed)
	assert.Equal(t, int64(0), res.Remaining)
}

func TestSlidingWindowCounterRetryIntoNextWindow(t *testing.T) {
	s := time.Second
	lim := limit.PerMinute(10).WithAlgorithm(limit.SlidingWindowCounter)
	runSteps(t, lim, []step{
		{0, 10, true, 0, 0, 120 * s},
		// Full in the current window: the count must become the previous
		// window's and decay by 1 of 10, 6 s into the next window.
		{30 * s, 1, false, 0, 36 * s, 90 * s},
		{66 * s, 1, true, 0, 0, 114 * s},
		// Two windows on, everything has decayed.
		{181 * s, 0, true, 10, 0, 0},
	})
}

func TestSlidingWindowLog(t *testing.T) {
	s := time.Second
	lim := limit.Per(3, 10*time.Second).WithAlgorithm(limit.SlidingWindowLog)
	runSteps(t, lim, []step{
		{0, 1, true, 2, 0, 10 * s},
		{4 * s, 2, true, 0, 0, 10 * s},
		{9 * s, 1, false, 0, 1 * s, 5 * s},
		{10 * s, 1, true, 0, 0, 10 * s},     // the first has left the window at exactly 10 s
		{11 * s, 2, false, 0, 3 * s, 9 * s}, // room for 2 once the pair logged at 4 s leaves, at 14 s
		{14 * s, 2, true, 0, 0, 10 * s},
	})
}

func TestErrorsForBadInput(t *testing.T) {
	e := newEngine(t, Config{})
	cases := []struct {
		name string
		key  string
		lim  limit.Limit
		n    int64
		want error
	}{
		{"empty key", "", limit.PerSecond(1), 1, limit.ErrInvalidKey},
		{"huge key", string(make([]byte, limit.MaxKeyLen+1)), limit.PerSecond(1), 1, limit.ErrInvalidKey},
		{"zero rate", "k", limit.PerSecond(0), 1, limit.ErrInvalidLimit},
		{"negative period", "k", limit.Per(1, -time.Second), 1, limit.ErrInvalidLimit},
		{"n above burst", "k", limit.PerSecond(10).WithBurst(5), 6, limit.ErrExceedsCapacity},
		{"n above window rate", "k2", limit.PerSecond(10).WithAlgorithm(limit.FixedWindow), 11, limit.ErrExceedsCapacity},
		{"negative n", "k", limit.PerSecond(10), -1, limit.ErrInvalidN},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.AllowN(t0, tc.key, tc.lim, tc.n)
			assert.ErrorIs(t, err, tc.want)
		})
	}
	// A bad request changes nothing: the key still has its whole burst.
	res, err := e.AllowN(t0, "k", limit.PerSecond(10).WithBurst(5), 5)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
}

func TestTimeGoingBackwardsNeverRefillsTwice(t *testing.T) {
	for _, alg := range limit.Algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			lim := limit.PerSecond(10).WithAlgorithm(alg)
			e := newEngine(t, Config{})
			admitted := int64(0)
			// Spend everything at t0+1s, then walk the clock back and forth
			// around it: nothing may be admitted before t0+1s+100ms.
			for _, d := range []time.Duration{time.Second, 0, time.Second - 500*time.Millisecond, time.Second, time.Second + 50*time.Millisecond, -time.Hour} {
				for range 20 {
					res, err := e.AllowN(at(d), "k", lim, 1)
					require.NoError(t, err)
					if res.Allowed {
						admitted++
					}
				}
			}
			want := int64(10)
			if alg == limit.LeakyBucket {
				want = 1 // the meter admits one and drains it over 100 ms
			}
			assert.Equal(t, want, admitted)
		})
	}
}

func TestSeveralLimitsOnOneKeyAreIndependent(t *testing.T) {
	// A client under a per-second and a per-hour limit at once: each limit
	// has its own state, and deciding under one never resets the other.
	e := newEngine(t, Config{})
	perSecond, perHour := limit.PerSecond(10), limit.PerHour(25)
	admitted := map[limit.Limit]int{}
	for i := range 60 {
		now := at(time.Duration(i) * 50 * time.Millisecond) // 20/s for 3 s
		for _, lim := range []limit.Limit{perSecond, perHour} {
			res, err := e.AllowN(now, "client", lim, 1)
			require.NoError(t, err)
			if res.Allowed {
				admitted[lim]++
			}
		}
	}
	assert.Equal(t, 25, admitted[perHour], "the hourly burst, spent once, not refilled by the other limit")
	assert.Equal(t, 10+29, admitted[perSecond], "the burst, and 10/s over the 2.95 s from the first request to the last")
	assert.Equal(t, 2, e.Len(), "two states for one key")

	// Three limits of one algorithm that differ only in rate stay apart too.
	for _, rate := range []int64{5, 6, 7} {
		lim := limit.PerMinute(rate).WithAlgorithm(limit.FixedWindow)
		n := 0
		for range 10 {
			if res, _ := e.AllowN(t0, "shared", lim, 1); res.Allowed {
				n++
			}
		}
		assert.Equal(t, int(rate), n)
	}
}
