package remote

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/limit"
)

// A daily quota in Tokyo decided in Redis: the window is today in Tokyo,
// and ResetAfter is the time to the next midnight there.
func TestCalendarInRedis(t *testing.T) {
	srv := redistest.Start(t)
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	require.NoError(t, err)
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindowCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			s := newStore(t, srv.Client(t))
			lim := limit.PerCalendar(3, limit.Day, "Asia/Tokyo").WithAlgorithm(alg)
			d, err := s.AllowN(bg, "k", lim, 3)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			today := lim.WindowAt(d.Now, tokyo)
			assert.Equal(t, today.Index, d.State.Window)
			if alg == limit.FixedWindow {
				assert.Equal(t, time.Duration(today.End-d.Now), d.ResetAfter, "until midnight in Tokyo")
			} else {
				tomorrowEnd := lim.WindowOf(today.Index+1, tokyo).End
				assert.Equal(t, time.Duration(tomorrowEnd-d.Now), d.ResetAfter, "today's count weighs until tomorrow ends")
			}
			d, err = s.AllowN(bg, "k", lim, 1)
			require.NoError(t, err)
			assert.False(t, d.Allowed)
			if alg == limit.FixedWindow {
				assert.Equal(t, time.Duration(today.End-d.Now), d.RetryAfter)
			}
		})
	}
}

// The node sends the window its clock falls in and the neighbours: a node
// a day behind still decides in Redis's day; one three days off is an
// error, never a decision in the wrong window.
func TestCalendarNodeClock(t *testing.T) {
	srv := redistest.Start(t)
	lim := limit.PerCalendar(5, limit.Day, "")
	behind, err := New(srv.Client(t), Options{Prefix: "cal:", Now: func() int64 { return time.Now().Add(-24 * time.Hour).UnixNano() }})
	require.NoError(t, err)
	d, err := behind.AllowN(bg, "k", lim, 1)
	require.NoError(t, err)
	today := lim.WindowAt(d.Now, nil)
	assert.Equal(t, today.Index, d.State.Window, "Redis's day, not the node's")
	assert.Equal(t, time.Duration(today.End-d.Now), d.ResetAfter)

	off, err := New(srv.Client(t), Options{Prefix: "cal:", Now: func() int64 { return time.Now().Add(72 * time.Hour).UnixNano() }})
	require.NoError(t, err)
	_, err = off.AllowN(bg, "k", lim, 1)
	assert.ErrorIs(t, err, ErrRedis)
	assert.ErrorContains(t, err, "outside the calendar windows the node sent")

	_, err = behind.AllowN(bg, "k", limit.PerCalendar(5, limit.Day, "Mars/Olympus_Mons"), 1)
	assert.ErrorIs(t, err, limit.ErrInvalidLimit)
}
