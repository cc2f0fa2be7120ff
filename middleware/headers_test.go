package middleware

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/limit"
	"github.com/hybridlimit/hybridlimit/rules"
)

// A token bucket of 5 a minute: one token every 12 s, burst 5, a minute to
// refill. The clock reads half a second past a whole second, so that every
// rounding shows.
func TestHeadersExact(t *testing.T) {
	lim, clk := manualLimiter(t, epoch.Add(500*time.Millisecond))
	srv := serve(t, Config{Limiter: lim, Rules: rules.Static(compile(t, `rate_limits:
  default: {requests: 5, window: 60}
`))})
	const policy = `"default";q=5;w=60`

	first := get(t, srv, "/")
	assert.Equal(t, http.StatusOK, first.Status)
	assert.Equal(t, "ok", first.Body)
	assert.Equal(t, map[string]string{
		"X-RateLimit-Limit":     "5",
		"X-RateLimit-Remaining": "4",
		"X-RateLimit-Reset":     "1800000013", // 1800000000.5 + 12 s, rounded up
		"RateLimit-Policy":      policy,
		"RateLimit":             `"default";r=4;t=12`,
	}, rateHeaders(first.Header))

	for range 4 {
		get(t, srv, "/")
	}
	denied := get(t, srv, "/")
	assert.Equal(t, http.StatusTooManyRequests, denied.Status)
	assert.Equal(t, "application/json", denied.Header.Get("Content-Type"))
	assert.Equal(t, `{"error":"rate_limit_exceeded","message":"Too many requests. Please retry after 12 seconds.","retry_after":12}`, denied.Body)
	assert.Equal(t, map[string]string{
		"X-RateLimit-Limit":     "5",
		"X-RateLimit-Remaining": "0",
		"X-RateLimit-Reset":     "1800000061", // the bucket is full a minute after the first request
		"RateLimit-Policy":      policy,
		"RateLimit":             `"default";r=0;t=12`, // t is the Retry-After: nothing may be used before it
		"Retry-After":           "12",
	}, rateHeaders(denied.Header))

	// 3.7 s later the next token is 8.3 s away: Retry-After rounds up.
	clk.Advance(3700 * time.Millisecond)
	denied = get(t, srv, "/")
	assert.Equal(t, `{"error":"rate_limit_exceeded","message":"Too many requests. Please retry after 9 seconds.","retry_after":9}`, denied.Body)
	assert.Equal(t, "9", denied.Header.Get("Retry-After"))
	assert.Equal(t, `"default";r=0;t=9`, denied.Header.Get("RateLimit"))
	assert.Equal(t, "1800000061", denied.Header.Get("X-RateLimit-Reset"))

	// 0.8 s away: at least 1 s, and the message says so in the singular.
	clk.Advance(7500 * time.Millisecond)
	denied = get(t, srv, "/")
	assert.Equal(t, `{"error":"rate_limit_exceeded","message":"Too many requests. Please retry after 1 second.","retry_after":1}`, denied.Body)
	assert.Equal(t, "1", denied.Header.Get("Retry-After"))

	clk.Advance(800 * time.Millisecond)
	again := get(t, srv, "/")
	assert.Equal(t, http.StatusOK, again.Status, "admitted once Retry-After has passed")
	assert.Equal(t, `"default";r=0;t=60`, again.Header.Get("RateLimit"))
}

// With several checks, RateLimit-Policy lists them all and the other fields
// describe the one with the least left relative to its limit.
func TestHeadersMostRestrictiveCheck(t *testing.T) {
	lim, _ := manualLimiter(t, epoch.Add(500*time.Millisecond))
	srv := serve(t, Config{Limiter: lim, Rules: rules.Static(compile(t, `rate_limits:
  global: {requests: 1000, window: 1, burst: 100}
  per_ip: {requests: 10, window: 60, algorithm: fixed_window}
  endpoints:
    /x: {requests: 30, window: 3600, algorithm: sliding_window_counter}
    /y: {requests: 3, window: 3600, algorithm: sliding_window_counter}
`))})
	// Each as its rule says: global 1000 a second (its burst of 100 is not
	// the quota), per_ip 10 a minute, the endpoints their rate per hour.
	const policyX = `"global";q=1000;w=1, "per_ip";q=10;w=60, "endpoint:/x";q=30;w=3600`

	// per_ip has 9/10 left, the endpoint 29/30, global 99 of its burst of
	// 100 (relative to the burst: Remaining never exceeds it). The fixed
	// window ends at the next whole minute, 1800000060.
	assert.Equal(t, map[string]string{
		"X-RateLimit-Limit":     "10",
		"X-RateLimit-Remaining": "9",
		"X-RateLimit-Reset":     "1800000060",
		"RateLimit-Policy":      policyX,
		"RateLimit":             `"per_ip";r=9;t=60`,
	}, rateHeaders(get(t, srv, "/x").Header))

	// On /y the endpoint has 2/3 left: tighter than per_ip's 8/10. A
	// sliding window counter is fresh two periods after its last request.
	assert.Equal(t, map[string]string{
		"X-RateLimit-Limit":     "3",
		"X-RateLimit-Remaining": "2",
		"X-RateLimit-Reset":     "1800007200",
		"RateLimit-Policy":      `"global";q=1000;w=1, "per_ip";q=10;w=60, "endpoint:/y";q=3;w=3600`,
		"RateLimit":             `"endpoint:/y";r=2;t=7200`,
	}, rateHeaders(get(t, srv, "/y").Header))
}

// The headers state the limit as the rule wrote it, for every algorithm:
// {requests: 3, window: 60, burst: 2} is 3 a minute (it used to answer
// X-RateLimit-Limit: 2 and q=2;w=40, the burst and its refill time).
func TestHeadersStateTheRuleAsWritten(t *testing.T) {
	for _, tc := range []struct {
		rule      string
		remaining string // after the first request
	}{
		{`{requests: 3, window: 60, burst: 2}`, "1"},
		{`{requests: 3, window: 60, algorithm: token_bucket}`, "2"},
		// As a meter a leaky bucket admits the next request once this one
		// has drained, 20 s later: nothing remains until then.
		{`{requests: 3, window: 60, algorithm: leaky_bucket, burst: 2}`, "0"},
		{`{requests: 3, window: 60, algorithm: leaky_bucket}`, "0"},
		{`{requests: 3, window: 60, algorithm: fixed_window}`, "2"},
		{`{requests: 3, window: 60, algorithm: sliding_window_log}`, "2"},
		{`{requests: 3, window: 60, algorithm: sliding_window_counter}`, "2"},
		{`{requests: 3, window: 1m}`, "2"},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			lim, _ := manualLimiter(t, epoch)
			srv := serve(t, Config{Limiter: lim, Rules: rules.Static(compile(t, "rate_limits:\n  default: "+tc.rule+"\n"))})
			h := get(t, srv, "/").Header
			assert.Equal(t, "3", h.Get("X-RateLimit-Limit"))
			assert.Equal(t, tc.remaining, h.Get("X-RateLimit-Remaining"))
			assert.Equal(t, `"default";q=3;w=60`, h.Get("RateLimit-Policy"))
		})
	}
}

// Which families are sent is configurable; Retry-After is always sent on a
// 429.
func TestHeaderFamilies(t *testing.T) {
	x := []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}
	ietf := []string{"RateLimit-Policy", "RateLimit"}
	for _, tc := range []struct {
		headers Headers
		want    []string
	}{
		{BothHeaders, append(append([]string{}, x...), ietf...)},
		{XRateLimitHeaders, x},
		{IETFHeaders, ietf},
		{NoHeaders, nil},
	} {
		t.Run(tc.headers.String(), func(t *testing.T) {
			lim, _ := manualLimiter(t, epoch)
			srv := serve(t, Config{Limiter: lim, Headers: tc.headers, Rules: rules.Static(compile(t, `rate_limits:
  default: {requests: 1, window: 60}
`))})
			keys := func(h http.Header) []string {
				var out []string
				for k := range rateHeaders(h) {
					out = append(out, k)
				}
				return out
			}
			ok := get(t, srv, "/")
			require.Equal(t, http.StatusOK, ok.Status)
			assert.ElementsMatch(t, tc.want, keys(ok.Header))
			denied := get(t, srv, "/")
			require.Equal(t, http.StatusTooManyRequests, denied.Status)
			assert.ElementsMatch(t, append(tc.want, "Retry-After"), keys(denied.Header))
		})
	}
}

// RateLimit-Policy's q and w are the limit as its rule wrote it, whatever
// the algorithm; a bucket's burst is not the quota.
func TestPolicyQuota(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit limit.Limit
		q     int64
		w     time.Duration
		field string
	}{
		{"token bucket", limit.PerMinute(100), 100, time.Minute, `"p";q=100;w=60`},
		{"token bucket with burst", limit.PerSecond(100).WithBurst(20), 100, time.Second, `"p";q=100;w=1`},
		{"leaky bucket", limit.PerHour(10).WithBurst(5).WithAlgorithm(limit.LeakyBucket), 10, time.Hour, `"p";q=10;w=3600`},
		{"bucket of 3 per 10 s", limit.Per(3, 10*time.Second), 3, 10 * time.Second, `"p";q=3;w=10`},
		{"bucket of 3 per 10 s, burst 2", limit.Per(3, 10*time.Second).WithBurst(2), 3, 10 * time.Second, `"p";q=3;w=10`},
		{"invalid", limit.Limit{}, 0, 0, `"p";q=0;w=1`},
		{"fixed window", limit.PerMinute(10).WithAlgorithm(limit.FixedWindow), 10, time.Minute, `"p";q=10;w=60`},
		{"sliding window log", limit.PerHour(10).WithAlgorithm(limit.SlidingWindowLog), 10, time.Hour, `"p";q=10;w=3600`},
		{"sliding window counter", limit.Per(50, 1500*time.Millisecond).WithAlgorithm(limit.SlidingWindowCounter), 50, 1500 * time.Millisecond, `"p";q=50;w=2`},
		{"sub-second window", limit.Per(5, 100*time.Millisecond).WithAlgorithm(limit.FixedWindow), 5, 100 * time.Millisecond, `"p";q=5;w=1`},
		// On 2026-02-10: the window is February, 28 days, not the nominal 30.
		{"a month", limit.PerCalendar(1000, limit.Month, "Europe/Paris"), 1000, 30 * 24 * time.Hour, `"p";q=1000;w=2419200`},
		// On the day the clocks go forward in Paris: 23 hours.
		{"a day", limit.PerCalendar(10, limit.Day, "Europe/Paris"), 10, 24 * time.Hour, `"p";q=10;w=82800`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, w := PolicyQuota(tc.limit)
			assert.Equal(t, tc.q, q)
			assert.Equal(t, tc.w, w)
			now := time.Date(2026, 2, 10, 12, 0, 0, 0, time.UTC)
			if tc.limit.Calendar == limit.Day {
				now = time.Date(2026, 3, 29, 12, 0, 0, 0, time.UTC)
			}
			var zones limit.Zones
			assert.Equal(t, tc.field, string(appendPolicy(nil, "p", tc.limit, now, &zones)))
		})
	}
}

// A calendar quota's headers announce its window: X-RateLimit-Reset and
// RateLimit's t count to the next midnight in its zone, RateLimit-Policy's
// w is the day's length.
func TestCalendarHeaders(t *testing.T) {
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	require.NoError(t, err)
	at := time.Date(2026, 6, 10, 21, 30, 0, 0, tokyo) // 2 h 30 min before midnight in Tokyo
	lim, _ := manualLimiter(t, at)
	srv := serve(t, Config{Limiter: lim, Rules: rules.Static(compile(t, `rate_limits:
  default: {requests: 2, window: day, zone: Asia/Tokyo}
`))})
	midnight := time.Date(2026, 6, 11, 0, 0, 0, 0, tokyo)
	first := get(t, srv, "/")
	assert.Equal(t, map[string]string{
		"X-RateLimit-Limit":     "2",
		"X-RateLimit-Remaining": "1",
		"X-RateLimit-Reset":     fmt.Sprint(midnight.Unix()),
		"RateLimit-Policy":      `"default";q=2;w=86400`,
		"RateLimit":             `"default";r=1;t=9000`,
	}, rateHeaders(first.Header))
	get(t, srv, "/")
	denied := get(t, srv, "/")
	assert.Equal(t, http.StatusTooManyRequests, denied.Status)
	assert.Equal(t, "9000", denied.Header.Get("Retry-After"), "until midnight in Tokyo")
	assert.Equal(t, fmt.Sprint(midnight.Unix()), denied.Header.Get("X-RateLimit-Reset"))
}

func TestSFString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"default", `"default"`},
		{"endpoint:POST /api/v1/upload", `"endpoint:POST /api/v1/upload"`},
		{`tier:"gold"`, `"tier:\"gold\""`},
		{`a\b`, `"a\\b"`},
		{"caf\u00e9\t", `"caf%C3%A9%09"`},
		{"", `""`},
	} {
		assert.Equal(t, tc.want, string(appendSFString(nil, tc.in)), "%q", tc.in)
	}
	assert.Equal(t, `"x";r=999999999999999;t=0`, string(appendServiceLimit(nil, "x", 1<<62, -5)), "integers clamped to 15 digits, negatives to 0")
}

func TestRounding(t *testing.T) {
	for _, tc := range []struct {
		d           time.Duration
		ceil, retry int64
	}{
		{-time.Second, 0, 1},
		{0, 0, 1},
		{time.Nanosecond, 1, 1},
		{999 * time.Millisecond, 1, 1},
		{time.Second, 1, 1},
		{time.Second + time.Nanosecond, 2, 2},
		{30 * time.Second, 30, 30},
		{90*time.Minute + 1, 5401, 5401},
	} {
		assert.Equal(t, tc.ceil, ceilSeconds(tc.d), "ceilSeconds(%v)", tc.d)
		assert.Equal(t, tc.retry, retrySeconds(tc.d), "retrySeconds(%v)", tc.d)
	}
	for _, tc := range []struct {
		now   time.Time
		after time.Duration
		want  int64
	}{
		{epoch, 0, 1_800_000_000},
		{epoch, time.Nanosecond, 1_800_000_001},
		{epoch.Add(500 * time.Millisecond), 500 * time.Millisecond, 1_800_000_001},
		{epoch.Add(500 * time.Millisecond), -time.Hour, 1_800_000_001},
		{epoch, time.Duration(1<<63 - 1), (1<<63 - 1) / int64(time.Second)},
	} {
		assert.Equal(t, tc.want, resetUnix(tc.now, tc.after), "resetUnix(%v, %v)", tc.now, tc.after)
	}
}

func TestTighter(t *testing.T) {
	check := func(capacity int64) rules.Check { return rules.Check{Limit: limit.PerHour(capacity)} }
	dec := func(remaining int64) hybrid.Decision {
		return hybrid.Decision{Result: limit.Result{Remaining: remaining}}
	}
	for _, tc := range []struct {
		ra, ca, rb, cb int64
		want           bool
	}{
		{9, 10, 29, 30, true},                        // 0.9 < 0.967
		{29, 30, 9, 10, false},                       // and not the other way
		{5, 10, 50, 100, false},                      // a tie is not tighter
		{0, 10, 0, 1000, false},                      // nor an empty tie
		{0, 1000, 1, 1000, true},                     // less left
		{1 << 45, 1 << 46, 1<<46 - 1, 1 << 46, true}, // no overflow
	} {
		assert.Equal(t, tc.want, tighter(dec(tc.ra), check(tc.ca), dec(tc.rb), check(tc.cb)), "%d/%d vs %d/%d", tc.ra, tc.ca, tc.rb, tc.cb)
	}
}
