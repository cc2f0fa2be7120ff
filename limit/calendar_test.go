package limit

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	var z Zones
	loc, err := z.Load(name)
	require.NoError(t, err)
	return loc
}

// Each unit's window holding an instant, in a zone: its start, end and
// index, across daylight saving time, month lengths and leap years.
func TestWindowAt(t *testing.T) {
	paris := zone(t, "Europe/Paris")
	tokyo := zone(t, "Asia/Tokyo")
	at := func(s string, loc *time.Location) time.Time {
		v, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
		require.NoError(t, err)
		return v
	}
	cases := []struct {
		name       string
		unit       Calendar
		loc        *time.Location
		t          string
		start, end string
		index      int64
	}{
		{"a day in Paris", Day, paris, "2026-06-10 13:00", "2026-06-10 00:00", "2026-06-11 00:00", 20614},
		{"the day clocks go forward: 23 hours", Day, paris, "2026-03-29 12:00", "2026-03-29 00:00", "2026-03-30 00:00", 20541},
		{"the day clocks go back: 25 hours", Day, paris, "2026-10-25 23:59", "2026-10-25 00:00", "2026-10-26 00:00", 20751},
		{"just before midnight in Tokyo is the same day", Day, tokyo, "2026-06-10 23:59", "2026-06-10 00:00", "2026-06-11 00:00", 20614},
		{"a week from Monday", Week, paris, "2026-06-14 22:00", "2026-06-08 00:00", "2026-06-15 00:00", 2945},
		{"a Monday starts its week", Week, paris, "2026-06-15 00:00", "2026-06-15 00:00", "2026-06-22 00:00", 2946},
		{"February in a leap year", Month, paris, "2028-02-29 12:00", "2028-02-01 00:00", "2028-03-01 00:00", 697},
		{"a month across the clocks going back", Month, paris, "2026-10-31 23:00", "2026-10-01 00:00", "2026-11-01 00:00", 681},
		{"December ends at the new year", Month, tokyo, "2026-12-31 23:00", "2026-12-01 00:00", "2027-01-01 00:00", 683},
		{"a year", Year, paris, "2026-07-01 00:00", "2026-01-01 00:00", "2027-01-01 00:00", 56},
		{"before 1970", Year, time.UTC, "1969-05-01 00:00", "1969-01-01 00:00", "1970-01-01 00:00", -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := PerCalendar(10, tc.unit, "x") // the zone is passed as loc
			w := l.WindowAt(at(tc.t, tc.loc).UnixNano(), tc.loc)
			assert.Equal(t, at(tc.start, tc.loc).UnixNano(), w.Start, "start %v", time.Unix(0, w.Start).In(tc.loc))
			assert.Equal(t, at(tc.end, tc.loc).UnixNano(), w.End, "end %v", time.Unix(0, w.End).In(tc.loc))
			assert.Equal(t, tc.index, w.Index)
			assert.Equal(t, w, l.WindowOf(w.Index, tc.loc), "WindowOf inverts the index")
		})
	}
	assert.Equal(t, 23*time.Hour, PerCalendar(1, Day, "").WindowAt(at("2026-03-29 12:00", paris).UnixNano(), paris).Len())
	assert.Equal(t, 25*time.Hour, PerCalendar(1, Day, "").WindowAt(at("2026-10-25 12:00", paris).UnixNano(), paris).Len())

	// Without a calendar: Periods from the epoch.
	w := Per(10, time.Minute).WithAlgorithm(FixedWindow).WindowAt(int64(90*time.Second), nil)
	assert.Equal(t, Window{Index: 1, Start: int64(time.Minute), End: int64(2 * time.Minute)}, w)
	w = Per(10, time.Minute).WithAlgorithm(FixedWindow).WindowAt(-1, nil)
	assert.Equal(t, Window{Index: -1, Start: -int64(time.Minute), End: 0}, w)
}

// Windows tile time: every instant lies in exactly one, and each ends where
// the next starts, also where a zone's clocks skip or repeat midnight.
func TestWindowsTileTime(t *testing.T) {
	for _, name := range []string{"UTC", "Europe/Paris", "America/Sao_Paulo", "America/Havana", "Asia/Beirut", "Pacific/Apia", "Australia/Lord_Howe"} {
		loc := zone(t, name)
		for _, unit := range []Calendar{Day, Week, Month, Year} {
			l := PerCalendar(1, unit, name)
			// Samoa skipped 2011-12-30 entirely; Sao Paulo's clocks skipped
			// midnight in November 2018; the rest cover other shapes.
			from := time.Date(2011, 12, 25, 0, 0, 0, 0, time.UTC).UnixNano()
			if unit == Day {
				from = time.Date(2018, 10, 30, 0, 0, 0, 0, time.UTC).UnixNano()
			}
			step := int64(37 * time.Minute)
			if unit == Month || unit == Year {
				step = int64(97 * time.Hour)
			}
			prev := l.WindowAt(from, loc)
			for ts := from; ts < from+int64(400*24*time.Hour); ts += step {
				w := l.WindowAt(ts, loc)
				require.True(t, w.Start <= ts && ts < w.End, "%s %v: %v not in [%v, %v)", name, unit,
					time.Unix(0, ts).In(loc), time.Unix(0, w.Start).In(loc), time.Unix(0, w.End).In(loc))
				if w.Index != prev.Index {
					require.Equal(t, prev.Index+1, w.Index, "%s %v: consecutive", name, unit)
					require.Equal(t, prev.End, w.Start, "%s %v: each ends where the next starts", name, unit)
				}
				prev = w
			}
		}
	}
}

func TestCalendarValidate(t *testing.T) {
	cases := []struct {
		name    string
		lim     Limit
		wantErr string
	}{
		{"a month in Paris", PerCalendar(1000, Month, "Europe/Paris"), ""},
		{"a day in UTC", PerCalendar(10, Day, ""), ""},
		{"sliding", PerCalendar(10, Week, "").WithAlgorithm(SlidingWindowCounter), ""},
		{"a bucket", PerCalendar(10, Day, "").WithAlgorithm(TokenBucket), "need fixed_window or sliding_window_counter"},
		{"the log", PerCalendar(10, Day, "").WithAlgorithm(SlidingWindowLog), "need fixed_window or sliding_window_counter"},
		{"a period too", Limit{Rate: 10, Period: time.Hour, Algorithm: FixedWindow, Calendar: Day}, "period 1h0m0s set on a calendar limit"},
		{"a burst", PerCalendar(10, Day, "").WithBurst(3), "has no burst"},
		{"zero rate", PerCalendar(0, Day, ""), "rate 0 must be positive"},
		{"rate too high", PerCalendar(MaxWindowRate+1, Day, ""), "exceeds"},
		{"unknown unit", PerCalendar(10, Calendar(9), ""), "unknown calendar 9"},
		{"a zone without a unit", Per(10, time.Hour).WithAlgorithm(FixedWindow), ""},
		{"zone alone", Limit{Rate: 10, Period: time.Hour, Algorithm: FixedWindow, Zone: "Europe/Paris"}, `zone "Europe/Paris" set without a calendar unit`},
		{"a zone with a space", PerCalendar(10, Day, "Europe/ Paris"), "is not in a zone name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.lim.Validate()
			if tc.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidLimit)
			assert.ErrorContains(t, err, tc.wantErr)
		})
	}
	assert.Equal(t, "1000/month Europe/Paris fixed_window", PerCalendar(1000, Month, "Europe/Paris").String())
	assert.Equal(t, "5/day UTC sliding_window_counter", PerCalendar(5, Day, "").WithAlgorithm(SlidingWindowCounter).String())
	assert.Equal(t, int64(1000), PerCalendar(1000, Month, "").Capacity())
	assert.Equal(t, 30*24*time.Hour, Month.Nominal())
}

func TestZones(t *testing.T) {
	var z Zones
	a, err := z.Load("Europe/Paris")
	require.NoError(t, err)
	b, err := z.Load("Europe/Paris")
	require.NoError(t, err)
	assert.Same(t, a, b, "loaded once")
	utc, err := z.Load("")
	require.NoError(t, err)
	assert.Equal(t, time.UTC, utc)
	_, err = z.Load("Mars/Olympus_Mons")
	assert.True(t, errors.Is(err, ErrInvalidLimit), "%v", err)
	assert.ErrorContains(t, err, `limit: invalid limit: unknown time zone "Mars/Olympus_Mons"`)
	_, err = z.Load("../../etc/passwd ")
	assert.ErrorIs(t, err, ErrInvalidLimit)
}

func TestParseCalendar(t *testing.T) {
	for s, want := range map[string]Calendar{"day": Day, "WEEK": Week, "Month": Month, "year": Year} {
		got, err := ParseCalendar(s)
		require.NoError(t, err)
		assert.Equal(t, want, got)
		assert.Equal(t, want.String(), calendarNames[want])
	}
	_, err := ParseCalendar("fortnight")
	assert.ErrorIs(t, err, ErrInvalidLimit)
	assert.Equal(t, "calendar(9)", Calendar(9).String())
}
