package reports

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/limit"
)

// The low mark is below every decision not settled, and trails the newest
// by at most maxOpenSeqs.
func TestSeqsLowMark(t *testing.T) {
	s := &seqs{next: 100}
	a, low, _ := s.begin()
	assert.Equal(t, int64(100), a)
	assert.Equal(t, int64(99), low)
	b, _, _ := s.begin()
	c, low, _ := s.begin()
	assert.Equal(t, int64(99), low, "a is open")
	s.settle(b)
	assert.Equal(t, int64(99), s.low(), "a still open")
	s.settle(a)
	assert.Equal(t, c-1, s.low(), "a and b settled, c open")
	s.settle(c)
	assert.Equal(t, c, s.low(), "all settled")
	s.settle(c) // twice: nothing
	s.settle(1) // long gone: nothing
	assert.Equal(t, c, s.low())

	// One decision never settled holds the mark for maxOpenSeqs decisions.
	stuck, _, _ := s.begin()
	var forced bool
	for range maxOpenSeqs {
		seq, low, f := s.begin()
		s.settle(seq)
		forced = forced || f
		if !f {
			assert.Equal(t, stuck-1, low)
		}
	}
	assert.True(t, forced)
	assert.Equal(t, uint64(1), s.forcedCount())
	assert.Equal(t, s.next-1, s.low(), "let go: the mark caught up")
}

// A calendar limit has no Period: the reporter numbers its windows as the
// engine does. Dividing by its Period panicked while the reporter's lock was
// held, and every later round and Close waited on that lock for good: a Sync
// decision on a calendar limit hung the test that made it.
func TestCalendarWindowsAreTheEngines(t *testing.T) {
	f := newFixture(t, Config{})
	tests := []struct {
		lim     limit.Limit
		tracked bool // the engine keeps its spend for the reports (not calendar limits: hybrid/calendar.go)
	}{
		{limit.PerCalendar(100, limit.Day, "Europe/Paris"), false},
		{limit.PerCalendar(100, limit.Month, "").WithAlgorithm(limit.SlidingWindowCounter), false},
		{limit.PerMinute(100).WithAlgorithm(limit.FixedWindow), true},
	}
	for _, tc := range tests {
		lim := tc.lim
		t.Run(lim.String(), func(t *testing.T) {
			require.True(t, f.allow(t, "k", lim, 3))
			_, rnow := f.r.now()
			loc, err := f.r.zones.Load(lim.Zone)
			require.NoError(t, err)
			assert.Equal(t, lim.WindowAt(rnow, loc).Index, f.r.windowOf(lim, rnow))

			f.r.Uncertain("k", lim, 7, 1) // a timed-out sync decision: held in the window's counter
			c := f.r.counters.m[keyOf("k", lim, f.r.windowOf(lim, rnow))]
			require.NotNil(t, c)
			assert.Len(t, c.uncertain, 1)
			_ = f.r.Estimate("k", lim)
			require.NoError(t, f.r.Round(bg))
			if tc.tracked {
				assert.Equal(t, int64(3), c.total, "the engine's spend, taken into the same counter")
			}
		})
	}
}
