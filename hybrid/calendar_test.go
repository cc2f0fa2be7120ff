package hybrid

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/clock"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/limit"
)

// A monthly quota in New York, local only: it resets at midnight on the
// first, New York time, and ResetAfter says so.
func TestCalendarLocalOnly(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	clk := clock.NewManual(time.Date(2026, 10, 31, 23, 0, 0, 0, ny))
	l := newLimiter(t, Config{Clock: clk})
	lim := PerCalendar(2, Month, "America/New_York")
	admitted, _ := count(t, l, "k", lim, 3)
	assert.Equal(t, 2, admitted)
	d, err := l.Allow(bg, "k", lim)
	require.NoError(t, err)
	assert.Equal(t, time.Hour, d.RetryAfter, "until November begins in New York")
	assert.Equal(t, time.Hour, d.ResetAfter)
	clk.Advance(time.Hour)
	admitted, _ = count(t, l, "k", lim, 3)
	assert.Equal(t, 2, admitted, "November's quota")
}

// In Sync mode a calendar quota is decided in Redis on Redis's day, shared
// by every node; while degraded, the node goes on from the state it last
// saw.
func TestCalendarSync(t *testing.T) {
	srv := redistest.Start(t)
	lim := PerCalendar(6, Day, "Australia/Sydney").WithAlgorithm(SlidingWindowCounter)
	a := newLimiter(t, Config{Redis: client(t, srv), Mode: Sync, Prefix: "cal:", FleetSize: 1, Logger: quietLog, BreakerOpenFor: time.Hour, RedisTimeout: 5 * time.Second})
	b := newLimiter(t, Config{Redis: client(t, srv), Mode: Sync, Prefix: "cal:", RedisTimeout: 5 * time.Second})
	admitted, sources := count(t, a, "k", lim, 2)
	assert.Equal(t, 2, admitted)
	assert.Equal(t, map[Source]int{Remote: 2}, sources)
	admitted, _ = count(t, b, "k", lim, 2)
	assert.Equal(t, 2, admitted, "one quota for the fleet")
	d, err := a.Allow(bg, "k", lim)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	sydney, err := time.LoadLocation("Australia/Sydney")
	require.NoError(t, err)
	now := a.Now()
	tomorrowEnd := lim.WindowOf(lim.WindowAt(now.UnixNano(), sydney).Index+1, sydney).End
	assert.InDelta(t, float64(tomorrowEnd-now.UnixNano()), float64(d.ResetAfter), float64(time.Second),
		"today's count weighs until tomorrow ends in Sydney")

	// b leaves, and a sees it gone: degraded, a divides by the fleet it saw
	// (FleetSize 1, or the nodes seen if more).
	require.NoError(t, b.Close(bg))
	require.Eventually(t, func() bool { return a.Stats().Reconcile.Nodes == 1 }, 10*time.Second, 5*time.Millisecond)
	srv.Kill()
	admitted, sources = count(t, a, "k", lim, 4)
	assert.Equal(t, 1, admitted, "degraded: a goes on from the 5 of 6 it last saw used")
	assert.Zero(t, sources[Remote])
}

// Async mode refuses a calendar quota for now, per call.
func TestCalendarAsyncRefused(t *testing.T) {
	srv := redistest.Start(t)
	l := newLimiter(t, Config{Redis: srv.Client(t), Prefix: "cal:"})
	_, err := l.Allow(bg, "k", PerCalendar(10, Week, ""))
	assert.ErrorIs(t, err, ErrUnsupported)
	assert.ErrorContains(t, err, "calendar windows (10/week UTC fixed_window) cannot run in async mode")
	_, err = l.Allow(bg, "k", PerCalendar(10, Week, "Nowhere/Land").WithAlgorithm(limit.SlidingWindowCounter))
	assert.ErrorIs(t, err, ErrUnsupported)
	local := newLimiter(t, Config{})
	_, err = local.Allow(bg, "k", PerCalendar(10, Week, "Nowhere/Land"))
	assert.ErrorIs(t, err, ErrInvalidLimit, "an unknown zone is the caller's mistake")
}
