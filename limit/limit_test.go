package limit

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidate(t *testing.T) {
	cases := []struct {
		name    string
		lim     Limit
		wantErr string // substring; empty means valid
	}{
		{"per second", PerSecond(100), ""},
		{"with burst", PerSecond(100).WithBurst(20), ""},
		{"one per day", Per(1, 24*time.Hour), ""},
		{"1e9 per second", PerSecond(1_000_000_000), ""},
		{"more than one per ns", PerSecond(2_000_000_000), "more than one request per nanosecond"},
		{"zero rate", PerSecond(0), "rate 0 must be positive"},
		{"negative rate", PerSecond(-5), "rate -5 must be positive"},
		{"zero period", Per(10, 0), "period 0s must be positive"},
		{"negative burst", PerSecond(10).WithBurst(-1), "burst -1 must not be negative"},
		{"unknown algorithm", PerSecond(10).WithAlgorithm(Algorithm(42)), "unknown algorithm 42"},
		{"burst too long", Per(1, 24*time.Hour).WithBurst(100), "exceeds"},
		{"fixed window", PerMinute(100).WithAlgorithm(FixedWindow), ""},
		{"window with burst", PerMinute(100).WithBurst(5).WithAlgorithm(FixedWindow), "has no burst"},
		{"window sub-microsecond", Per(10, 1500*time.Nanosecond).WithAlgorithm(SlidingWindowCounter), "whole number of microseconds"},
		{"a year of 365 days", Per(10, 365*24*time.Hour).WithAlgorithm(FixedWindow), ""},
		{"window too long", Per(10, MaxWindowPeriod+time.Microsecond).WithAlgorithm(FixedWindow), "exceeds"},
		{"window rate too high", Per(MaxWindowRate+1, time.Second).WithAlgorithm(FixedWindow), "exceeds"},
		{"log at its bound", PerSecond(MaxLogRate).WithAlgorithm(SlidingWindowLog), ""},
		{"log too big", PerSecond(MaxLogRate + 1).WithAlgorithm(SlidingWindowLog), "use sliding_window_counter"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.lim.Validate()
			if tc.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrInvalidLimit), "wraps ErrInvalidLimit: %v", err)
			assert.Contains(t, err.Error(), tc.wantErr)
			assert.True(t, strings.HasPrefix(err.Error(), "limit: "), "message starts with the package name: %v", err)
		})
	}
}

func TestCapacityIntervalTolerance(t *testing.T) {
	cases := []struct {
		lim       Limit
		capacity  int64
		interval  time.Duration
		tolerance time.Duration
	}{
		{PerSecond(100), 100, 10 * time.Millisecond, time.Second},
		{PerSecond(100).WithBurst(20), 20, 10 * time.Millisecond, 200 * time.Millisecond},
		{PerSecond(3), 3, 333333334, 3 * 333333334}, // rounded up: never faster than the limit
		{PerSecond(1_000_000_000), 1_000_000_000, 1, time.Second},
		{PerMinute(60).WithAlgorithm(FixedWindow).WithBurst(0), 60, time.Second, 60 * time.Second},
		{PerSecond(10).WithAlgorithm(LeakyBucket), 10, 100 * time.Millisecond, time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.lim.String(), func(t *testing.T) {
			assert.Equal(t, tc.capacity, tc.lim.Capacity())
			assert.Equal(t, tc.interval, tc.lim.Interval())
			if tc.lim.Algorithm.IsBucket() {
				assert.Equal(t, tc.tolerance, tc.lim.Tolerance())
			}
		})
	}
}

// TestBurstWorkedExample pins the example in Limit's documentation.
func TestBurstWorkedExample(t *testing.T) {
	l := PerSecond(100).WithBurst(20)
	assert.Equal(t, int64(20), l.Capacity(), "20 requests pass at once from a full bucket")
	assert.Equal(t, 10*time.Millisecond, l.Interval(), "then one every 10 ms")
	assert.Equal(t, 200*time.Millisecond, l.Tolerance(), "an idle key refills to 20 after 200 ms")
	assert.Equal(t, int64(100), PerSecond(100).Capacity(), "without WithBurst the burst equals the rate")
}

func TestCheckN(t *testing.T) {
	l := PerSecond(10).WithBurst(5)
	assert.NoError(t, l.CheckN(0), "n == 0 peeks")
	assert.NoError(t, l.CheckN(5))
	err := l.CheckN(6)
	assert.ErrorIs(t, err, ErrExceedsCapacity)
	assert.Contains(t, err.Error(), "n 6 > capacity 5")
	assert.ErrorIs(t, l.CheckN(-1), ErrInvalidN)
}

func TestCheckKey(t *testing.T) {
	assert.NoError(t, CheckKey("user:42"))
	assert.NoError(t, CheckKey(strings.Repeat("k", MaxKeyLen)))
	assert.ErrorIs(t, CheckKey(""), ErrInvalidKey)
	err := CheckKey(strings.Repeat("k", MaxKeyLen+1))
	assert.ErrorIs(t, err, ErrInvalidKey)
	assert.Contains(t, err.Error(), "4097 bytes")
}

func TestParseAlgorithm(t *testing.T) {
	for _, a := range Algorithms {
		got, err := ParseAlgorithm(a.String())
		require.NoError(t, err)
		assert.Equal(t, a, got)
	}
	cases := map[string]Algorithm{
		"Token-Bucket":    TokenBucket,
		" sliding_window": SlidingWindowCounter,
		"LEAKY_BUCKET":    LeakyBucket,
	}
	for in, want := range cases {
		got, err := ParseAlgorithm(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	_, err := ParseAlgorithm("round_robin")
	assert.ErrorIs(t, err, ErrInvalidLimit)
	assert.Contains(t, err.Error(), `"round_robin"`)
	assert.Equal(t, "algorithm(9)", Algorithm(9).String())
}
