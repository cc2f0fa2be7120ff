package local

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/limit"
)

// paris reads a wall-clock time in Paris as Unix ns.
func paris(t *testing.T, s string) int64 {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	v, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
	require.NoError(t, err)
	return v.UnixNano()
}

// A monthly quota in Paris: counted from the first of the month at
// midnight, Paris time, and reset exactly then; ResetAfter and RetryAfter
// say when.
func TestCalendarFixedWindow(t *testing.T) {
	e := newEngine(t, Config{})
	lim := limit.PerCalendar(3, limit.Month, "Europe/Paris")
	at := func(s string, n int64) limit.Result {
		res, err := e.AllowN(paris(t, s), "k", lim, n)
		require.NoError(t, err)
		return res
	}
	res := at("2026-10-20 10:00", 2)
	assert.True(t, res.Allowed)
	assert.Equal(t, int64(1), res.Remaining)
	endOfOctober := time.Duration(paris(t, "2026-11-01 00:00") - paris(t, "2026-10-20 10:00"))
	assert.Equal(t, endOfOctober, res.ResetAfter, "the window ends with October, Paris time (the clocks go back on the 25th)")
	assert.True(t, at("2026-10-31 23:59", 1).Allowed)
	res = at("2026-10-31 23:59", 1)
	assert.False(t, res.Allowed)
	assert.Equal(t, time.Minute, res.RetryAfter)
	assert.Equal(t, time.Minute, res.ResetAfter)
	res = at("2026-11-01 00:00", 3)
	assert.True(t, res.Allowed, "a new month, a new quota")
	assert.Equal(t, time.Duration(paris(t, "2026-12-01 00:00")-paris(t, "2026-11-01 00:00")), res.ResetAfter)
	assert.Equal(t, 30*24*time.Hour, res.ResetAfter, "November: 30 days")
}

// A daily sliding window counter across the 23-hour day: the previous
// day's count weighs by how much of the current day's length reaching back
// from now overlaps it.
func TestCalendarSlidingCounter(t *testing.T) {
	e := newEngine(t, Config{})
	lim := limit.PerCalendar(100, limit.Day, "Europe/Paris").WithAlgorithm(limit.SlidingWindowCounter)
	res, err := e.AllowN(paris(t, "2026-03-28 20:00"), "k", lim, 100)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	// 2026-03-29 lasts 23 hours. At 03:00 (Paris; 2 hours after midnight,
	// the clocks having skipped 02:00), 2/23 of the day has passed: the
	// previous day weighs 21/23 of 100, 91.3, so 8 remain.
	res, err = e.AllowN(paris(t, "2026-03-29 03:00"), "k", lim, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(8), res.Remaining)
	assert.Equal(t, 21*time.Hour, res.ResetAfter, "the previous day's count weighs until this day ends")
	res, err = e.AllowN(paris(t, "2026-03-29 03:00"), "k", lim, 9)
	require.NoError(t, err)
	assert.False(t, res.Allowed)
	res, err = e.AllowN(paris(t, "2026-03-29 03:00"), "k", lim, 8)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	assert.Equal(t, time.Duration(paris(t, "2026-03-31 00:00")-paris(t, "2026-03-29 03:00")), res.ResetAfter,
		"today's count weighs until tomorrow ends")
}

// A calendar limit's unknown zone is the caller's error; calendar spend is
// never recorded for the reconciler; an idle calendar key is swept.
func TestCalendarEngine(t *testing.T) {
	e := newEngine(t, Config{TrackSpend: true, KeepOrphans: true})
	_, err := e.AllowN(t0, "k", limit.PerCalendar(3, limit.Day, "Mars/Olympus_Mons"), 1)
	assert.ErrorIs(t, err, limit.ErrInvalidLimit)
	assert.ErrorContains(t, err, "unknown time zone")
	lim := limit.PerCalendar(3, limit.Day, "Asia/Tokyo")
	for range 4 {
		_, err := e.AllowN(t0, "k", lim, 1)
		require.NoError(t, err)
	}
	require.NoError(t, e.RecordN(t0, "k", lim, 1))
	assert.Empty(t, e.TakeSpend(nil), "calendar spend is not the reconciler's")
	assert.Zero(t, e.Sweep(t0, 100), "busy today")
	assert.Equal(t, 1, e.Sweep(t0+int64(24*time.Hour), 100), "forgotten once its day is over")

	// Changing the zone starts the key afresh.
	for range 3 {
		_, _ = e.AllowN(t0, "z", lim, 1)
	}
	res, err := e.AllowN(t0, "z", limit.PerCalendar(3, limit.Day, "Europe/Paris"), 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
}

// Seed takes a calendar key's global count for the window it is in.
func TestCalendarSeed(t *testing.T) {
	e := newEngine(t, Config{})
	lim := limit.PerCalendar(10, limit.Week, "")
	now := time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC).UnixNano()
	w := lim.WindowAt(now, nil)
	require.NoError(t, e.Seed(now, "k", lim, limit.State{Window: w.Index, Count: 7}, ShareOne, 0, false))
	res, err := e.AllowN(now, "k", lim, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(3), res.Remaining)
	require.NoError(t, e.Seed(now, "old", lim, limit.State{Window: w.Index - 1, Count: 7}, ShareOne, 0, false))
	res, _ = e.AllowN(now, "old", lim, 0)
	assert.Equal(t, int64(10), res.Remaining, "last week's count does not weigh on a fixed window")
}
